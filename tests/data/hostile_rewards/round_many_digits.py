# attack: a huge Python float rounded to 15 digits (a 320-digit expansion), again and again, once charged as 8
# class: work-accounting
# expect: work-budget
# stage: run

BIG = 1.7e308


def _reward_round(state):
    total = 0.0
    for i in range(64):
        for j in range(16):
            total = total + round(BIG, 15) * 0.0  # <- rejected here
    return state.base_height * 0.0 + total
