# attack: (N,1)*(1,N)*... broadcasts to N^3 elements; fine at N=64, fatal at N=4096
# expect: array-size
# stage: run


def _reward_outer(state):
    h = state.base_height
    cube = h[:, None, None] * h[None, :, None] * h[None, None, :]  # <- rejected here
    return np.sum(cube, axis=(1, 2))
