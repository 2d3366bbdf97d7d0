# attack: get an alias of the state through astype(copy=False) by position
# class: writable-state
# expect: dtype
# stage: static


def _reward_alias(state):
    alias = state.base_height.astype(np.float64, "K", "unsafe", True, False)  # <- rejected here
    return alias
