# attack: a scalar instead of one value per environment
# expect: shape
# stage: run


def _reward_scalar(state):  # <- rejected here
    return 1.0
