# attack: reach the module globals (and the real builtins) through a function's __globals__
# expect: private-attribute
# stage: static


def helper(state):
    return state.base_height


def _reward_globals(state):
    builtins = helper.__globals__["__builtins__"]  # <- rejected here
    return builtins["open"]("pwned.txt", "w")
