# attack: equal nested tuples compared in a loop: 270,000 element comparisons each, once charged as 65
# class: work-accounting
# expect: work-budget
# stage: run

ROW = (0.5,) * 64


def _reward_compare(state):
    again = (0.25 + 0.25,) * 64  # equal to ROW element by element, but not the same objects
    grid, other = ((ROW,) * 64,) * 64, ((again,) * 64,) * 64
    same = 0.0
    for i in range(8):
        same = same + float(grid == other)  # <- rejected here
    return state.base_height * 0.0 + same * 0.0
