# attack: read files through numpy (np.load / np.loadtxt)
# expect: np-name
# stage: static


def _reward_load(state):
    data = np.loadtxt("/etc/hostname", dtype=str)  # <- rejected here
    return state.base_height + len(data)
