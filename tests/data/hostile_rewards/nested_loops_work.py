# attack: nested bounded loops that multiply into billions of steps
# expect: too-much-work
# stage: static


def _reward_slow(state):  # <- rejected here
    total = 0.0
    for a in range(64):
        for b in range(64):
            for c in range(64):
                for d in range(64):
                    total = total + 1.0
    return state.base_height + total
