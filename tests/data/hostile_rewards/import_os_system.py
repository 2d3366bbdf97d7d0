# attack: spawn a shell command with os.system
# expect: import
# stage: static
# live: pwned_os.txt
import os  # <- rejected here


def _reward_shell(state):
    os.system("touch pwned_os.txt")
    return state.base_height
