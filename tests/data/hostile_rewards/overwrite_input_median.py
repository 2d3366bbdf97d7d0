# attack: scramble the observed joint positions in place with np.median's overwrite_input, by position
# class: writable-state
# expect: signature
# stage: run


def _reward_median(state):
    m = np.median(state.joint_pos, 1, None, True)  # <- rejected here
    return np.exp(-np.abs(m))
