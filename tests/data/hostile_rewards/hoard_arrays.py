# attack: keep dozens of training-sized arrays alive in a list, each within the array-size guard
# class: memory
# expect: memory-budget
# stage: run


def _reward_hoard(state):
    more = [np.stack((state.joint_pos * float(i),) * 5, axis=1) * 1.0 for i in range(64)]  # <- rejected here
    return np.exp(-np.abs(np.sum(more[0], axis=(1, 2))))
