"""Read-only state for generated terms: copies that no route can write, let alone write back.

The environment's RewardState holds some of its own persistent buffers (the default pose, the
joint limits, ...), so handing it to generated code as is would let one write change what
training, the actor or another term sees. Generated terms get a copy whose memory is immutable:
a numpy array over a `bytes` object (in process) or over a read-only mapping of shared memory
(in the worker process, see isolation.py). Neither can be made writable again (numpy refuses
`setflags(write=True)` on an array whose buffer is read-only), so the guarantee does not rest on
the static rules finding every way to write.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from motionvl.rewards.state import RewardState


def frozen(array) -> np.ndarray:
    """A read-only copy of `array` that cannot be made writable (its memory is a bytes object)."""
    array = np.asarray(array)
    copy = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=array.dtype)
    return copy.reshape(array.shape)


def frozen_state(state: RewardState, fields=None) -> RewardState:
    """`state` with every array field (or only those in `fields`; the others None) replaced by a frozen
    copy; floats and the joint-name tuple are immutable already."""
    values = {}
    for field in dataclasses.fields(RewardState):
        value = getattr(state, field.name)
        if isinstance(value, np.ndarray):
            value = frozen(value) if fields is None or field.name in fields else None
        values[field.name] = value
    return RewardState(**values)
