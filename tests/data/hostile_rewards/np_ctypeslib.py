# attack: load a shared library through numpy.ctypeslib
# expect: np-name
# stage: static


def _reward_lib(state):
    libc = np.ctypeslib.load_library("libc.so.6", "/lib")  # <- rejected here
    return state.base_height + libc.getpid() * 0
