# attack: infinite only on hard impacts (contact force above 2 kN), never in a calm test batch
# class: check-unlike-training
# expect: non-finite
# stage: run


def _cost_impact(state):  # <- rejected here
    return np.where(state.foot_contact_force[:, 0] > 2000.0, np.inf, 0.0)
