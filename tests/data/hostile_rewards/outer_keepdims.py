# attack: a keepdims (N,1) array meets an (N,) array: N^2 elements that only show at large N
# expect: array-size
# stage: run


def _reward_outer(state):
    column = np.sum(state.joint_pos, axis=1, keepdims=True)
    square = column * state.base_height  # <- rejected here
    return np.mean(square, axis=1)
