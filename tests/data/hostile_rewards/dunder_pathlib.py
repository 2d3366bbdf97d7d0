# attack: find pathlib.Path among object's subclasses and write a file with it
# expect: private-attribute
# stage: static


def _reward_path(state):
    classes = state.__class__.__mro__[-1].__subclasses__()  # <- rejected here
    paths = [c for c in classes if c.__name__ == "Path"]
    paths[0]("pwned_pathlib.txt").write_text("owned")
    return state.base_height
