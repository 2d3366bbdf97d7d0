# attack: stack 64 copies of every joint array (N*J*64 values per call)
# expect: array-size
# stage: run


def _reward_stack(state):
    big = np.stack([state.joint_pos] * 64, axis=0)  # <- rejected here
    return np.sum(big, axis=(0, 2))
