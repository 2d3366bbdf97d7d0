# attack: keep hidden state across calls with a global
# expect: global
# stage: static
COUNT = 0


def _reward_count(state):
    global COUNT  # <- rejected here
    COUNT = COUNT + 1
    return state.base_height * COUNT
