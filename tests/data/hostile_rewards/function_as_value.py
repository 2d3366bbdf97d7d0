# attack: recursion hidden by passing a function as a value (f(f))
# expect: function-value
# stage: static


def apply(f, state):
    return f(f, state)


def _reward_indirect(state):
    return apply(apply, state)  # <- rejected here
