"""An example bridge from motionvl/LowCommand to a vendor-style low-level command, with the drives' watchdog.

The deployment node's pd path sends one LowCommand per command cycle: per motor name q, dq, kp, kd and
tau_ff. A robot's SDK takes its own frame: Unitree's low-level command (`LowCmd` of unitree_go and
unitree_hg, sent over DDS by unitree_sdk2) holds a fixed array of motor slots, each with `mode`
(enable), `q`, `dq`, `tau` (feed-forward), `kp` and `kd`, and the drive computes
tau_out = kp (q - q_m) + kd (dq - dq_m) + tau. `VendorLowCommand` is that shape, nothing more: it is no
vendor's wire format (no header fields, no CRC of theirs). A real bridge maps it onto the SDK's own
message in its `send` callable and keeps everything else here: the slot table, the refusal of a bad
command, and the watchdog.

The watchdog: a frame goes out every bridge period whatever arrives. While the newest good LowCommand is
younger than `timeout_s` the frame carries it; before the first one, and once commands stop for
`timeout_s` (the host died, the network broke, a bad command stream), every driven slot damps: kp 0,
kd `damping_kd`, q at the last commanded target (kp is 0: it exerts nothing), dq 0, tau 0. A drive that
holds the last command instead would keep its gains and feed-forward on a robot nobody controls.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import zlib
from typing import Callable, Sequence

MODE_DISABLED = 0
"""A slot no motor of the robot config drives: the drive stays off."""
MODE_ENABLED = 1
"""A driven slot (Unitree's low-level `mode` 1: the motor's servo law on)."""
SLOT_FORMAT = "<B5f"
"""One packed slot: mode (uint8), q, dq, tau, kp, kd (float32, little-endian)."""


@dataclasses.dataclass
class MotorSlot:
    """One motor slot of the vendor frame."""

    mode: int = MODE_DISABLED
    q: float = 0.0
    """rad, motor space."""
    dq: float = 0.0
    """rad/s."""
    tau: float = 0.0
    """N m, feed-forward."""
    kp: float = 0.0
    """N m/rad."""
    kd: float = 0.0
    """N m s/rad."""


@dataclasses.dataclass
class VendorLowCommand:
    """One frame for the drives: every slot, and whether the watchdog damps it."""

    motor_cmd: list
    """MotorSlot per slot of the vendor's motor array."""
    damping: bool
    """True: no fresh command; every driven slot damps."""
    sequence: int
    """Frames sent before this one."""

    def pack(self) -> bytes:
        """The frame as bytes: the slots (SLOT_FORMAT each), then the sequence (uint32) and a CRC32 of all of it
        (for a transport that carries bytes; the layout is this module's, not a vendor's)."""
        body = b"".join(struct.pack(SLOT_FORMAT, s.mode, s.q, s.dq, s.tau, s.kp, s.kd) for s in self.motor_cmd)
        body += struct.pack("<I", self.sequence & 0xFFFFFFFF)
        return body + struct.pack("<I", zlib.crc32(body))



def unpack_frame(data: bytes) -> tuple[list, int]:
    """(slots, sequence) of a frame `VendorLowCommand.pack` made; ValueError when the CRC or the length is off."""
    size = struct.calcsize(SLOT_FORMAT)
    if len(data) < 8 or (len(data) - 8) % size:
        raise ValueError(f"a frame of {len(data)} bytes is no whole number of slots")
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    if zlib.crc32(body) != crc:
        raise ValueError("CRC mismatch")
    slots = [MotorSlot(*struct.unpack_from(SLOT_FORMAT, body, k * size)) for k in range((len(body) - 4) // size)]
    return slots, struct.unpack("<I", body[-4:])[0]


class LowCommandBridge:
    """LowCommand per motor name -> VendorLowCommand frames, damping when commands stop (ROS-free: the node
    hands it commands and asks it for frames on its own clock)."""

    def __init__(self, motor_names: Sequence[str], slots: Sequence[int], damping_kd: Sequence[float],
                 timeout_s: float, num_slots: int | None = None, send: Callable[[VendorLowCommand], None] | None = None):
        """`slots[k]`: the vendor slot of motor_names[k]; `damping_kd[k]`: its damping gain (N m s/rad) when
        commands stop; `num_slots`: the vendor frame's motor array (default: one past the highest slot);
        `send`: called with every frame."""
        self.motor_names = tuple(str(n) for n in motor_names)
        self.slots = tuple(int(s) for s in slots)
        self.damping_kd = tuple(float(k) for k in damping_kd)
        if not (len(self.motor_names) == len(self.slots) == len(self.damping_kd)):
            raise ValueError(f"{len(self.motor_names)} motors, {len(self.slots)} slots, {len(self.damping_kd)} "
                             "damping gains: one each per motor")
        if len(set(self.slots)) != len(self.slots) or min(self.slots, default=0) < 0:
            raise ValueError(f"slots must be distinct and >= 0, got {list(self.slots)}")
        if any(not math.isfinite(k) or k <= 0 for k in self.damping_kd):
            raise ValueError(f"damping gains must be finite and > 0 (kp 0 and kd 0 is no damping), got "
                             f"{list(self.damping_kd)}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.num_slots = max(self.slots, default=-1) + 1 if num_slots is None else int(num_slots)
        if self.num_slots <= max(self.slots, default=-1):
            raise ValueError(f"num_slots {self.num_slots} leaves no room for slot {max(self.slots)}")
        self.timeout_s = float(timeout_s)
        self.send = send
        self._index = {n: k for k, n in enumerate(self.motor_names)}
        self._command: list | None = None  # per motor (q, dq, kp, kd, tau_ff) of the newest good command
        self._received_at: float | None = None
        self.sequence = 0
        self.refused = 0
        """Commands refused (a motor missing, a value not finite, a negative gain)."""

    def command(self, names: Sequence[str], drives: Sequence, now: float) -> None:
        """Take one LowCommand (`names` and its per-drive q, dq, kp, kd, tau_ff objects) received at `now`
        (monotonic s). ValueError, the command refused and the watchdog not fed: a motor of ours missing or
        named twice, the lists of different lengths, a value not finite, a negative gain. Names of other
        motors are ignored."""
        names = [str(n) for n in names]
        if len(names) != len(drives):
            self.refused += 1
            raise ValueError(f"{len(names)} motor names for {len(drives)} commands")
        where: dict = {}
        for i, n in enumerate(names):
            if n in where:
                self.refused += 1
                raise ValueError(f"motor {n!r} named twice")
            where[n] = i
        missing = [n for n in self.motor_names if n not in where]
        if missing:
            self.refused += 1
            raise ValueError(f"no command for {missing}")
        values = []
        for n in self.motor_names:
            d = drives[where[n]]
            v = (float(d.q), float(d.dq), float(d.kp), float(d.kd), float(d.tau_ff))
            if not all(math.isfinite(x) for x in v) or v[2] < 0 or v[3] < 0:
                self.refused += 1
                raise ValueError(f"motor {n!r}: q, dq, kp, kd, tau_ff {v}: not finite or a negative gain")
            values.append(v)
        self._command, self._received_at = values, now

    @property
    def last_command_at(self) -> float | None:
        """When the newest good command came (monotonic s; None: none yet)."""
        return self._received_at

    def damping(self, now: float) -> bool:
        """Whether a frame at `now` damps: no good command yet, or none for timeout_s."""
        return self._received_at is None or now - self._received_at > self.timeout_s

    def frame(self, now: float) -> VendorLowCommand:
        """The frame for `now`, sent with `send` when there is one."""
        damp = self.damping(now)
        slots = [MotorSlot() for _ in range(self.num_slots)]
        for k, slot in enumerate(self.slots):
            if damp:
                q = self._command[k][0] if self._command is not None else 0.0
                slots[slot] = MotorSlot(MODE_ENABLED, q, 0.0, 0.0, 0.0, self.damping_kd[k])
            else:
                q, dq, kp, kd, tau_ff = self._command[k]
                slots[slot] = MotorSlot(MODE_ENABLED, q, dq, tau_ff, kp, kd)
        frame = VendorLowCommand(slots, damp, self.sequence)
        self.sequence += 1
        if self.send is not None:
            self.send(frame)
        return frame
