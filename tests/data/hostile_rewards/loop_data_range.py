# attack: a loop whose length comes from data (unbounded)
# expect: loop
# stage: static


def _reward_slow(state):
    total = 0.0
    for i in range(int(np.max(state.base_height) * 1e9)):  # <- rejected here
        total = total + 1.0
    return state.base_height + total
