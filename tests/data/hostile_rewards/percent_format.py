# attack: '%' formatting with a huge width allocates gigabytes
# expect: string-format
# stage: static


def _reward_pad(state):
    text = "%010000000000d" % 1  # <- rejected here
    return state.base_height + len(text)
