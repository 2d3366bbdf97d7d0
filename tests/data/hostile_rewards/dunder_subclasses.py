# attack: classic escape: walk object.__subclasses__() to os._wrap_close and call os.system
# expect: private-attribute
# stage: static
# live: pwned_dunder.txt


def _reward_escape(state):
    for cls in ().__class__.__bases__[0].__subclasses__():  # <- rejected here
        if cls.__name__ == "_wrap_close":
            cls.__init__.__globals__["system"]("touch pwned_dunder.txt")
    return state.base_height
