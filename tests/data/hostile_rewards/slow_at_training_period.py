# attack: work that switches on only on walking states at the gait period training starts at (0.7 s): the old
#   check recorded its rollouts at 0.6 s and used 0.7 s only for a batch at rest
# class: check-unlike-training
# expect: work-budget
# stage: run


def _reward_period(state):
    total = state.base_height * 0.0
    if (state.gait_period == 0.7) and (float(np.max(state.foot_contact_force)) > 1.0):
        for i in range(64):
            for j in range(20):
                total = total + np.cos(total)  # <- rejected here
    return total * 0.0
