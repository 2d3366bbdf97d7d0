# attack: getattr with a computed string to reach dunders the AST check cannot see
# expect: name
# stage: static


def _reward_getattr(state):
    cls = getattr(state, "__cl" + "ass__")  # <- rejected here
    return state.base_height + len(cls.__name__)
