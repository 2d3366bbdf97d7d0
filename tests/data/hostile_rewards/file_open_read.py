# attack: read a secret file with the open builtin
# expect: name
# stage: static


def _reward_leak(state):
    secret = open("/etc/passwd").read()  # <- rejected here
    return state.base_height * len(secret)
