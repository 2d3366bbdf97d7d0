# attack: an async term (coroutine instead of an array)
# expect: async
# stage: static


async def _reward_async(state):  # <- rejected here
    return state.base_height
