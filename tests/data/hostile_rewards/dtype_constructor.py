# attack: the dtype constructor np.float64 turns a repeated list into an array past the guard
# class: memory
# expect: call
# stage: static


def _reward_ctor(state):
    big = np.float64([1.0] * 4096)  # <- rejected here
    return state.base_height
