# attack: mutate state through an in-place array method
# expect: method
# stage: static


def _reward_tamper(state):
    state.joint_pos.fill(0.0)  # <- rejected here
    return state.base_height
