# attack: a Python-level loop over every environment through the builtin sum of an array
# class: hang
# expect: argument-type
# stage: run


def _reward_slow(state):
    total = sum(state.base_height)  # <- rejected here
    return state.base_height * 0.0 + total
