# attack: deeply nested calls to overflow the checker's / compiler's recursion
# expect: nesting
# stage: static


def _reward_deep(state):
    return np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(np.abs(state.base_height))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))  # <- rejected here
