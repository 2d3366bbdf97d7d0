# attack: write a file at an absolute path outside the working directory
# expect: name
# stage: static
# live: /tmp/motionvl_sandbox_pwned_abs.txt


def _reward_write(state):
    open("/tmp/motionvl_sandbox_pwned_abs.txt", "w").write("owned")  # <- rejected here
    return state.base_height
