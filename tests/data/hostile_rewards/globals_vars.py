# attack: read and rewrite the module namespace with globals()
# expect: name
# stage: static


def _reward_globals(state):
    g = globals()  # <- rejected here
    g["np"] = None
    return state.base_height
