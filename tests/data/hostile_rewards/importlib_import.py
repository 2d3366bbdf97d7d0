# attack: import os through importlib obtained with __import__
# expect: name
# stage: static


def _reward_importlib(state):
    os = __import__("importlib").import_module("os")  # <- rejected here
    os.system("touch pwned_importlib.txt")
    return state.base_height
