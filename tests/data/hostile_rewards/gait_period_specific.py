# attack: NaN only at the training gait period (0.7 s) the old check never used (0.8 s)
# class: check-unlike-training
# expect: non-finite
# stage: run


def _reward_period(state):  # <- rejected here
    return np.log(np.ones_like(state.base_height) * (state.gait_period - 0.75) + 1e-12) * 0.0
