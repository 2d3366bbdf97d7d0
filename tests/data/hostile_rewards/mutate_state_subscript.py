# attack: overwrite the simulator's state arrays in place
# expect: assignment
# stage: static


def _reward_tamper(state):
    state.joint_pos[:, 0] = 0.0  # <- rejected here
    return state.base_height
