# attack: round the joint velocities the actor observes, in place, through round's out argument
# class: writable-state
# expect: signature
# stage: run


def _cost_vel(state):
    state.joint_vel.round(0, state.joint_vel)  # <- rejected here
    return np.zeros_like(state.base_height)
