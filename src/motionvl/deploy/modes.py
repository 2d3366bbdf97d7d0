"""The deployment modes and the one state machine that moves between them.

    PASSIVE --> STAND --> RUN
       ^          ^ \\     / |
       |           \\ v   v  |
       +---------- DAMP <---+      (every mode has an edge to DAMP; faults and the e-stop take it)

PASSIVE: zero torque. STAND: gains and targets ramp from where they are to the default pose.
RUN: the policy. DAMP: pure damping. Never PASSIVE -> RUN (nor DAMP -> RUN): RUN is reached only
from STAND, once its ramp has completed. A fault or the e-stop switches to DAMP and latches:
while a fault is latched every request but DAMP is refused, and only `rearm` clears it, when the
caller is allowed to (a parameter, off by default: on hardware an operator re-arms).
"""

from __future__ import annotations

import dataclasses
import enum


class Mode(str, enum.Enum):
    PASSIVE = "PASSIVE"
    STAND = "STAND"
    RUN = "RUN"
    DAMP = "DAMP"


TRANSITIONS = {
    Mode.PASSIVE: (Mode.STAND, Mode.DAMP),
    Mode.STAND: (Mode.RUN, Mode.DAMP),
    Mode.RUN: (Mode.STAND, Mode.DAMP),
    Mode.DAMP: (Mode.PASSIVE, Mode.STAND),
}
"""The requests each mode accepts (to itself is always a no-op success)."""

FAULT_KINDS = ("estop", "stale_state", "out_of_order_state", "frozen_state", "non_finite_input", "unusable_input",
               "non_finite_policy", "joint_limit", "joint_velocity", "gyro", "fall", "overrun", "watchdog",
               "second_writer", "second_state_writer", "internal")


@dataclasses.dataclass(frozen=True)
class Fault:
    """Why the controller switched to DAMP."""

    kind: str
    """One of FAULT_KINDS."""
    reason: str
    """What was seen, for a person: which joint, which value, which bound."""
    cycle: int = 0
    """The command cycle that first saw it."""

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class Transition:
    cycle: int
    source: Mode
    target: Mode
    why: str


class ModeMachine:
    """Modes, latched faults and the transition log; knows nothing about robots or time."""

    def __init__(self, allow_rearm: bool = False):
        self.mode = Mode.PASSIVE
        self.allow_rearm = bool(allow_rearm)
        self.faults: list[Fault] = []
        """Latched faults, oldest first; empty when armed."""
        self.transitions: list[Transition] = []
        self.fault_count = 0
        """Faults latched since start (re-arming does not reset it)."""

    @property
    def latched(self) -> bool:
        return bool(self.faults)

    def request(self, target: Mode | str, *, cycle: int = 0, ready: bool = True,
                not_ready_reason: str = "") -> tuple[bool, str]:
        """Ask for `target`; (accepted, message). `ready` False refuses with `not_ready_reason`
        (the controller's own preconditions: a policy for RUN, a completed ramp, a live state stream)."""
        try:
            target = Mode(str(target.value if isinstance(target, Mode) else target).upper())
        except ValueError:
            return False, f"unknown mode {target!r} (modes: {', '.join(m.value for m in Mode)})"
        if target == self.mode:
            return True, f"already in {target.value}"
        if target == Mode.DAMP:
            self._enter(Mode.DAMP, cycle, "requested")
            return True, "DAMP"
        if self.faults:
            return False, (f"{self.mode.value} -> {target.value} refused: latched fault ({self._fault_text()}); "
                           "re-arm first")
        if target not in TRANSITIONS[self.mode]:
            path = " -> ".join(m.value for m in (Mode.PASSIVE, Mode.STAND, Mode.RUN))
            return False, f"{self.mode.value} -> {target.value} is not allowed (the way up is {path})"
        if not ready:
            return False, f"{self.mode.value} -> {target.value} refused: {not_ready_reason}"
        self._enter(target, cycle, "requested")
        return True, target.value

    def fault(self, fault: Fault) -> bool:
        """Latch `fault` and switch to DAMP; False when the same kind is already latched."""
        if any(f.kind == fault.kind for f in self.faults):
            return False
        self.faults.append(fault)
        self.fault_count += 1
        if self.mode != Mode.DAMP:
            self._enter(Mode.DAMP, fault.cycle, str(fault))
        return True

    def rearm(self, *, conditions: list[str] = (), cycle: int = 0) -> tuple[bool, str]:
        """Clear the latched faults (the mode stays DAMP) when allowed and nothing is still wrong."""
        if not self.faults:
            return True, "nothing to re-arm: no latched fault"
        if not self.allow_rearm:
            return False, ("re-arm refused: software re-arm is off (parameter allow_rearm); on hardware re-arming "
                           "is an operator's act at the robot (restart the deployment node)")
        if conditions:
            return False, "re-arm refused: still " + "; ".join(conditions)
        cleared = self._fault_text()
        self.faults.clear()
        self.transitions.append(Transition(cycle, self.mode, self.mode, f"re-armed (cleared {cleared})"))
        return True, f"re-armed, cleared {cleared}; mode stays {self.mode.value}"

    def _fault_text(self) -> str:
        return "; ".join(str(f) for f in self.faults)

    def _enter(self, target: Mode, cycle: int, why: str) -> None:
        self.transitions.append(Transition(cycle, self.mode, target, why))
        self.mode = target


def status_from_message(msg) -> dict:
    """The deployment node's status dict (mode, stand_complete, faults, policy, path, dry_run, cycle, transition:
    None before the first) from a motionvl/msg/DeploymentStatus: rclpy's or one rosbags read from a bag.
    ValueError when its mode or transition names no mode (another program may publish anything)."""
    names = [m.value for m in Mode]
    if msg.mode >= len(names) or names[msg.mode] != msg.mode_name:
        raise ValueError(f"mode {msg.mode} / mode_name {msg.mode_name!r}: not one of {names} (or they disagree)")
    transition = None
    if msg.transition_to:
        if msg.transition_to not in names or msg.transition_from not in names:
            raise ValueError(f"transition {msg.transition_from!r} -> {msg.transition_to!r}: not modes")
        transition = {"from": msg.transition_from, "to": msg.transition_to, "why": msg.transition_why,
                      "cycle": int(msg.transition_cycle)}
    return {"mode": msg.mode_name, "stand_complete": bool(msg.stand_complete), "faults": list(msg.faults),
            "policy": msg.policy or None, "path": msg.path, "dry_run": bool(msg.dry_run), "cycle": int(msg.cycle),
            "transition": transition}
