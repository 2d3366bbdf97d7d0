# attack: an integer reward of 2**63 - 1 per step
# class: check-unlike-training
# expect: output-range
# stage: run


def _reward_int(state):  # <- rejected here
    return np.ones_like(state.base_height).astype(np.int64) * (2**63 - 1)
