# attack: rebinding inside a comprehension with := to grow a value each iteration
# expect: walrus
# stage: static


def _reward_walrus(state):
    n = 2
    grown = [n := n * n for i in range(64)]  # <- rejected here
    return state.base_height + len(grown)
