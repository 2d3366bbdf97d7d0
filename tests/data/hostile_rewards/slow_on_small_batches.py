# attack: work that switches on only for batches smaller than training's (evaluations run the reward on fewer
#   environments), which the old check never ran
# class: check-unlike-training
# expect: work-budget
# stage: run


def _reward_small(state):
    total = state.base_height * 0.0
    if state.num_envs < 256:
        for i in range(64):
            for j in range(20):
                total = total + np.cos(total)  # <- rejected here
    return total * 0.0
