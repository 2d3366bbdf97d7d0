# attack: a generated term under a library term's name: the reward reflection would report its statistics as
#   the library term's
# class: checker
# expect: shadow
# stage: static


def _reward_alive(state):  # <- rejected here
    return np.ones_like(state.base_height)
