# attack: compile and run a code object
# expect: name
# stage: static


def _reward_compile(state):
    code = compile("open('pwned_compile.txt', 'w')", "x", "exec")  # <- rejected here
    return state.base_height
