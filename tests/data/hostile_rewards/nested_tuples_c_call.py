# attack: one C-level call over nested tuples of arrays: cheap on a small batch, minutes on a training batch
# class: hang
# expect: argument-type
# stage: run
# train: yes


def _reward_nested(state):
    rows = ((state.base_height,) * 64,) * 64
    return np.sum(rows, axis=(0, 1)) * 0.0 + 1.0  # <- rejected here
