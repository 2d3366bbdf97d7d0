# attack: self-applying lambda (Y-combinator style) to recurse without names
# expect: lambda
# stage: static


def _reward_loop(state):
    omega = (lambda f: f(f))(lambda f: f(f))  # <- rejected here
    return state.base_height + omega
