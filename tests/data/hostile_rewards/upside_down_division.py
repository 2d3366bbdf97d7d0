# attack: divide by zero when the robot lies upside down (a fall the old check never drew)
# class: check-unlike-training
# expect: non-finite
# stage: run


def _cost_flip(state):  # <- rejected here
    return 1.0 / (1.0 - state.projected_gravity[:, 2]) * 0.0
