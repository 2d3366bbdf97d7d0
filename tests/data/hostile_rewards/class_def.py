# attack: define a class to override operators / __del__ hooks
# expect: class
# stage: static
class Evil:  # <- rejected here
    def __del__(self):
        pass


def _reward_evil(state):
    return state.base_height
