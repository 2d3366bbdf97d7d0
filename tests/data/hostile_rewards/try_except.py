# attack: swallow the watchdog / guard errors with a bare except
# expect: try
# stage: static


def _reward_swallow(state):
    try:  # <- rejected here
        value = state.base_height / 0.0
    except BaseException:
        value = state.base_height
    return value
