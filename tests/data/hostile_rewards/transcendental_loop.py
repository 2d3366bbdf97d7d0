# attack: 64 sine and cosine passes over the joints per call: few elements, each costing ~100 additions
# class: work-accounting
# expect: work-budget
# stage: run


def _reward_heavy(state):
    total = np.zeros_like(state.joint_pos)
    for i in range(64):
        total = total + np.sin(state.joint_pos) * np.cos(state.joint_pos)  # <- rejected here
    return np.exp(-np.mean(np.abs(total), axis=1))
