# attack: 64 exp/log passes over the joints per call: few elements, many expensive operations
# class: work-accounting
# expect: work-budget
# stage: run


def _reward_heavy(state):
    total = np.zeros_like(state.joint_pos)
    for i in range(64):
        total = total + np.exp(np.log(np.abs(state.joint_pos) + 1.0))  # <- rejected here
    return np.exp(-np.mean(total, axis=1))
