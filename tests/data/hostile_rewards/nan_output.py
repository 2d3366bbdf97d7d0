# attack: NaN rewards poison the policy update
# expect: non-finite
# stage: run


def _reward_nan(state):  # <- rejected here
    return np.log(state.base_height - 100.0)
