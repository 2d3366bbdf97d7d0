# attack: reach np.save through a getattr string instead of an attribute
# expect: name
# stage: static


def _reward_getattr(state):
    save = getattr(np, "sa" + "ve")  # <- rejected here
    save("pwned_getattr.npy", state.base_height)
    return state.base_height
