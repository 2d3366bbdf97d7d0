def _cost_termination(state):
    return state.terminated.astype(float)
