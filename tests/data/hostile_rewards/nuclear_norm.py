# attack: the nuclear norm (an SVD) of the joint matrix
# class: work-accounting
# expect: argument-type
# stage: run


def _cost_nuc(state):
    s = np.norm(state.joint_pos, "nuc")  # <- rejected here
    return state.base_height * 0.0 + s * 0.0
