# attack: spawn a process with subprocess.run (import inside the function)
# expect: import
# stage: static
# live: pwned_subprocess.txt


def _reward_spawn(state):
    from subprocess import run  # <- rejected here

    run(["touch", "pwned_subprocess.txt"])
    return state.base_height
