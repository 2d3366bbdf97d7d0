# attack: fetch __import__ out of __builtins__
# expect: name
# stage: static


def _reward_builtins(state):
    imp = __builtins__["__import__"]  # <- rejected here
    imp("os").system("touch pwned_builtins.txt")
    return state.base_height
