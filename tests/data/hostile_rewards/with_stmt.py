# attack: a context manager (e.g. to hold a file open)
# expect: with
# stage: static


def _reward_with(state):
    with open("pwned_with.txt", "w") as handle:  # <- rejected here
        handle.write("owned")
    return state.base_height
