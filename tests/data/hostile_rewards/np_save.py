# attack: write a file through numpy (np.save)
# expect: np-name
# stage: static
# live: pwned_save.npy


def _reward_save(state):
    np.save("pwned_save.npy", state.base_height)  # <- rejected here
    return state.base_height
