# attack: (N, J) @ (J, N) builds an N x N matrix (16 M entries at N = 4096)
# expect: operator
# stage: static


def _reward_gram(state):
    gram = state.joint_pos @ state.joint_pos.T  # <- rejected here
    return np.sum(gram, axis=1)
