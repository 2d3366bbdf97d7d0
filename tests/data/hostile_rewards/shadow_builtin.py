# attack: shadow a builtin / the np namespace to confuse later checks
# expect: shadow
# stage: static


def _reward_shadow(state):
    np = state  # <- rejected here
    return np.base_height
