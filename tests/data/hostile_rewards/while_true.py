# attack: infinite loop with while True
# expect: while-loop
# stage: static


def _reward_spin(state):
    total = 0.0
    while True:  # <- rejected here
        total = total + 1.0
    return state.base_height * total
