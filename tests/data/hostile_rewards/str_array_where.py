# attack: smuggle a 4096-char string into an array: 16 KB per element, gigabytes at large N
# expect: argument-type
# stage: run


def _reward_text(state):
    text = np.where(state.terminated, "a" * 4096, "b")  # <- rejected here
    return state.base_height
