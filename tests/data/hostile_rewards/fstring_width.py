# attack: f-string with a huge width allocates gigabytes
# expect: f-string
# stage: static


def _reward_pad(state):
    text = f"{0:>10000000000}"  # <- rejected here
    return state.base_height + len(text)
