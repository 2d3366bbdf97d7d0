# attack: sum() with a list start concatenates lists and grows memory quadratically
# expect: argument-type
# stage: run


def _reward_concat(state):
    rows = [[0.0] * 64] * 64
    flat = sum(rows, [])  # <- rejected here
    return state.base_height + len(flat)
