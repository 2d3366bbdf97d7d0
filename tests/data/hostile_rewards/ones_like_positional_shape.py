# attack: allocate 128 GB through ones_like's shape argument, given by position
# class: memory
# expect: signature
# stage: run


def _reward_ones(state):
    big = np.ones_like(state.base_height, None, "C", True, (17179869184,))  # <- rejected here
    return state.base_height + big[0]
