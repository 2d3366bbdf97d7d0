# attack: repeated squaring of a Python int in a bounded loop grows without bound
# expect: int-size
# stage: run


def _reward_square(state):
    n = 10
    for i in range(40):
        n = n * n  # <- rejected here
    return state.base_height * 0 + n
