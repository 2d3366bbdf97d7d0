# attack: open a network connection after importing socket
# expect: import
# stage: static
import socket  # <- rejected here


def _reward_net(state):
    socket.create_connection(("127.0.0.1", 9), timeout=0.1)
    return state.base_height
