# attack: an enormous integer literal
# expect: literal
# stage: static
BIG = 1234567890123456789012345678901234567890123456789012345678901234567890  # <- rejected here


def _reward_big(state):
    return state.base_height * 0 + BIG
