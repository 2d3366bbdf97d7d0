# attack: reach frame globals through a generator's gi_frame (no underscore needed)
# expect: attribute
# stage: static


def _reward_frame(state):
    frame = (x for x in range(3)).gi_frame  # <- rejected here
    return frame.f_globals["np"] + state.base_height
