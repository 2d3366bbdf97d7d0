# attack: write the action buffer through a ufunc's third positional argument
# class: writable-state
# expect: signature
# stage: run


def _cost_action(state):
    np.add(state.action, 1.0, state.action)  # <- rejected here
    return np.zeros_like(state.base_height)
