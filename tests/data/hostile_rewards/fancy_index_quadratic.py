# attack: fancy indexing with an (N,) index array on axis 1 makes an (N, N) result
# expect: index
# stage: run


def _reward_gather(state):
    idx = (state.gait_phase * 0).astype(int)
    picked = state.joint_pos[:, idx]  # <- rejected here
    return np.sum(picked, axis=1)
