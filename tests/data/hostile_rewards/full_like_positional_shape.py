# attack: allocate a huge array through full_like's shape argument, given by position
# class: memory
# expect: signature
# stage: run
# train: yes


def _reward_big(state):
    big = np.full_like(state.base_height, 1.0, 0.0, "C", True, (17179869184,))  # <- rejected here
    return state.base_height + big[0]
