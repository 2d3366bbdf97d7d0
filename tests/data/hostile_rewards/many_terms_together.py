# attack: terms each within their own work budget, together well over one (the budget was per term only)
# class: work-accounting
# expect: work-budget
# stage: run


def spin(state):
    total = np.zeros_like(state.joint_pos)
    for i in range(20):
        total = total + np.sin(state.joint_pos + i)  # <- rejected here
    return np.exp(-np.mean(np.abs(total), axis=1))


def _reward_one(state):
    return spin(state)


def _reward_two(state):
    return spin(state)


def _reward_three(state):
    return spin(state)
