# attack: infinite rewards via division by zero
# expect: non-finite
# stage: run


def _cost_inf(state):  # <- rejected here
    return 1.0 / np.zeros_like(state.base_height)
