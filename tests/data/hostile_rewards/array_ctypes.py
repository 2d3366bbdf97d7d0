# attack: reach raw memory / ctypes through the array's .ctypes attribute
# expect: attribute
# stage: static


def _reward_poke(state):
    pointer = state.base_height.ctypes  # <- rejected here
    return state.base_height + pointer.data * 0
