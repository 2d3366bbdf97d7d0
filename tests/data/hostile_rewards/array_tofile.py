# attack: write a file through an array method (ndarray.tofile)
# expect: method
# stage: static
# live: pwned_tofile.bin


def _reward_dump(state):
    state.joint_pos.tofile("pwned_tofile.bin")  # <- rejected here
    return state.base_height
