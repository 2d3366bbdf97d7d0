# attack: a finite but huge reward (1e308) that overflows the weighted sum into inf and NaN
# class: check-unlike-training
# expect: output-range
# stage: run


def _reward_huge(state):  # <- rejected here
    return np.ones_like(state.base_height) * 1e308
