# attack: misbehave only on training-sized batches (the old check used 64 and 257 environments)
# class: check-unlike-training
# expect: non-finite
# stage: run
# train: yes


def _reward_sized(state):  # <- rejected here
    bad = state.num_envs % 16 == 0
    return np.ones_like(state.base_height) * (np.inf if bad else 1.0)
