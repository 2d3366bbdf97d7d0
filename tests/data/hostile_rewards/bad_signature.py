# attack: a term that takes extra arguments the trainer never passes
# expect: signature
# stage: static


def _reward_extra(state, scale=1000000):  # <- rejected here
    return state.base_height * scale
