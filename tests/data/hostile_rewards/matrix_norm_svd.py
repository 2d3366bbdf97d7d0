# attack: a singular value decomposition per call through a matrix 2-norm, charged as if it were a sum
# class: work-accounting
# expect: matrix-norm
# stage: run
# train: yes


def _cost_svd(state):
    s = np.norm(state.joint_pos, 2)  # <- rejected here
    return state.base_height * 0.0 + s * 0.0
