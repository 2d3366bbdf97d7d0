def _cost_fell(state):
    return state.terminated.astype(float)
