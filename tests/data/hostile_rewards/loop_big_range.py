# attack: a for loop over a huge range
# expect: loop
# stage: static


def _reward_slow(state):
    total = 0.0
    for i in range(10**9):  # <- rejected here
        total = total + 1.0
    return state.base_height + total
