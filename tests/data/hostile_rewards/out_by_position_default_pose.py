# attack: drift the default pose (the env's own buffer) through np.clip's fourth positional argument
# class: writable-state
# expect: signature
# stage: run


def _cost_pose(state):
    np.clip(state.default_joint_pos, -0.1, 0.1, state.default_joint_pos)  # <- rejected here
    return np.mean(np.abs(state.joint_pos - state.default_joint_pos), axis=1)
