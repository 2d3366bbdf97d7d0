# attack: astype to a huge unicode dtype (16 KB per element)
# expect: dtype
# stage: static


def _reward_text(state):
    text = state.base_height.astype("U4096")  # <- rejected here
    return state.base_height
