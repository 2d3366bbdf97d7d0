# attack: import socket through __import__ without an import statement
# expect: name
# stage: static


def _reward_net(state):
    sock = __import__("socket").socket()  # <- rejected here
    sock.connect(("127.0.0.1", 9))
    return state.base_height
