# attack: a per-joint (N, J) array instead of (N,)
# expect: shape
# stage: run


def _cost_joints(state):  # <- rejected here
    return np.square(state.joint_vel)
