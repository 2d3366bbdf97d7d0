# attack: format-string attribute lookup reaches dunders: '{0.__class__...}'.format(x)
# expect: method
# stage: static


def _reward_format(state):
    text = "{0.__class__.__init__.__globals__}".format(state)  # <- rejected here
    return state.base_height + len(text)
