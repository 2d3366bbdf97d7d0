# attack: a huge unicode dtype through zeros_like's dtype argument, by position
# class: memory
# expect: signature
# stage: run


def _reward_text(state):
    text = np.zeros_like(state.base_height, "U1000000")  # <- rejected here
    return state.base_height
