# attack: mutual recursion between two helpers
# expect: recursion
# stage: static


def ping(state):
    return pong(state)


def pong(state):
    return ping(state)  # <- rejected here


def _reward_pingpong(state):
    return ping(state)
