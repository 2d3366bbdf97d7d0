# attack: unbounded recursion
# expect: recursion
# stage: static


def _reward_recurse(state):
    return _reward_recurse(state)  # <- rejected here
