# attack: build new classes with type()/object to hook operators
# expect: name
# stage: static


def _reward_type(state):
    evil = type("Evil", (object,), {})  # <- rejected here
    return state.base_height + evil
