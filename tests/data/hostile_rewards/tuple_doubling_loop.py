# attack: doubling a tuple 64 times (2**64 elements) inside a bounded loop
# expect: sequence-size
# stage: run


def _reward_double(state):
    items = (0.0,)
    for i in range(64):
        items = items + items  # <- rejected here
    return state.base_height + len(items)
