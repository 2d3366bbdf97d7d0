# attack: a generator term that never returns an array
# expect: yield
# stage: static


def _reward_gen(state):
    yield state.base_height  # <- rejected here
