# attack: kill the trainer by raising SystemExit
# expect: raise
# stage: static


def _reward_exit(state):
    raise SystemExit(1)  # <- rejected here
