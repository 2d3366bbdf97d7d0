# attack: a number parsed from a long string, again and again, once charged as nothing
# class: work-accounting
# expect: work-budget
# stage: run

DIGITS = "0." + "1234567890" * 409


def _reward_parse(state):
    total = 0.0
    for i in range(64):
        for j in range(16):
            total = total + float(DIGITS) * 0.0  # <- rejected here
    return state.base_height * 0.0 + total
