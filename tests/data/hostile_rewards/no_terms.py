# attack: only helpers, nothing that produces a reward
# expect: no-terms
# stage: static
SIGMA = 0.25  # <- rejected here


def height_error(state):
    return np.square(state.base_height - 0.8)
