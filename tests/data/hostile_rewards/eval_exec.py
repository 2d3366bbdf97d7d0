# attack: run arbitrary code strings with eval/exec
# expect: name
# stage: static


def _reward_eval(state):
    value = eval("__import__('os').getcwd()")  # <- rejected here
    return state.base_height + len(value)
