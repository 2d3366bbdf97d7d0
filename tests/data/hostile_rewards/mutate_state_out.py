# attack: mutate state through a ufunc out= argument
# expect: keyword
# stage: static


def _reward_tamper(state):
    np.clip(state.joint_pos, 0.0, 0.0, out=state.joint_pos)  # <- rejected here
    return state.base_height
