# attack: a median (a sort-like partition of a copy) recomputed in a loop
# class: work-accounting
# expect: work-budget
# stage: run


def _reward_median(state):
    total = np.zeros_like(state.base_height)
    for i in range(48):
        total = total + np.median(state.joint_pos, axis=1)  # <- rejected here
    return np.exp(-np.abs(total))
