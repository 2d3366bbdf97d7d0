# attack: read raw bytes of a file through np.fromfile
# expect: np-name
# stage: static


def _reward_read(state):
    raw = np.fromfile("/etc/passwd", dtype=np.uint8)  # <- rejected here
    return state.base_height + raw[0]
