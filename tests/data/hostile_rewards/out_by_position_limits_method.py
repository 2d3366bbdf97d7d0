# attack: widen the joint limits through the out argument of the clip method, by position
# class: writable-state
# expect: signature
# stage: run


def _cost_limits(state):
    state.joint_pos_upper.clip(9.0, 9.0, state.joint_pos_upper)  # <- rejected here
    return np.zeros_like(state.base_height)
