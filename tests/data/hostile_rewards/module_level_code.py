# attack: run code at import time (module level), not inside a term
# expect: module-statement
# stage: static
np.exp(1.0)  # <- rejected here


def _reward_ok(state):
    return state.base_height
