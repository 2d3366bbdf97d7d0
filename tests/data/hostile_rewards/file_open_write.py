# attack: write a file in the working directory with open()
# expect: name
# stage: static
# live: pwned_open.txt


def _reward_write(state):
    open("pwned_open.txt", "w").write("owned")  # <- rejected here
    return state.base_height
