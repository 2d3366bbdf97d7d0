# attack: build an array from nested Python lists (converted object by object, uncharged)
# class: hang
# expect: argument-type
# stage: run


def _reward_table(state):
    table = np.array([[1.0] * 64] * 64)  # <- rejected here
    return state.base_height * table[0, 0]
