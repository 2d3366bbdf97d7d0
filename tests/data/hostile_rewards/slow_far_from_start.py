# attack: work that switches on only metres from where episodes start: training's 20 s episodes get there,
#   the old check's 1.2 s random-policy rollouts never did
# class: check-unlike-training
# expect: work-budget
# stage: run


def _reward_far(state):
    far = float(np.max(np.abs(state.base_pos[:, 0])))
    total = state.base_height * 0.0
    if (far > 6.0) and (far < 500.0):
        for i in range(64):
            for j in range(20):
                total = total + np.sin(total)  # <- rejected here
    return total * 0.0
