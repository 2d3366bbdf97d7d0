"""The vlm_critic node's work without ROS: critique a collected rollout, compare two rollouts.

`CriticService` owns the critic backend (built on first use; a backend that cannot be built makes
every answer invalid with the reason, the service stays up), the kinematic critic that cross-checks
a VLM's descriptors, and the last few finished rollouts so a comparison can name them. It keeps no
best rollout or feedback of its own: what a rollout is judged against comes with each request (a
Critique goal's `previous_best`, a comparison's two rollouts).

A comparison request (`ComparisonRequest`, from a Compare goal) names two rollouts, each one this
service critiqued recently ({"rollout_id": ...}, among the last `keep_rollouts`) or a directory written
by `Rollout.save` ({"path": ...}; with `rollout_dir` set the service saves every rollout it critiques and
reports the directory as meta["rollout_path"]).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from motionvl.backend_names import CRITICS, MODEL_CRITICS, ModelSettings, backend_keywords
from motionvl.critic.base import Rollout, create_critic
from motionvl.critic.kinematic import KinematicCritic
from motionvl.critic.rollouts import CollectedRollout
from motionvl.critic.crosscheck import cross_check
from motionvl.critic.schema import Comparison, MotionFeedback

BACKENDS = CRITICS


def backend_factory(backend: str, settings: ModelSettings | None = None, *, use_contact_sheet: bool = False,
                    **extra) -> Callable[[], Any]:
    """A function building the named critic backend from its ModelSettings (motionvl.backend_names: the options
    each backend takes), `use_contact_sheet` and `extra` for a VLM; ValueError naming what is missing."""
    keywords = backend_keywords("critic", backend, settings or ModelSettings())
    if backend not in MODEL_CRITICS:
        return lambda: create_critic(backend, **keywords)
    return lambda: create_critic(backend, **keywords, use_contact_sheet=use_contact_sheet, **extra)


@dataclasses.dataclass(frozen=True)
class ServiceSettings:
    """What the service keeps and checks: CriticService's settings and the vlm_critic node's parameters."""

    merge_kinematics: bool = True
    """After a VLM critique, cross-check its claims with the kinematic measurements: contradictions marked, its
    alignment scaled by the share of measurable claims confirmed (motionvl.critic.crosscheck)."""
    keep_rollouts: int = 4
    """Finished rollouts kept for critiques and comparisons by id (memory: their frames)."""
    rollout_dir: str = ""
    """Save every critiqued rollout (frames + trajectory) under this directory; its path goes in the feedback's
    meta.rollout_path. Empty = do not save."""


@dataclasses.dataclass(frozen=True)
class ComparisonRequest:
    """Which two rollouts to compare, against which task."""

    request_id: Any
    """Echoed in the answer's meta["request_id"]."""
    task: str
    first: dict
    """{"rollout_id": ...} or {"path": ...}."""
    second: dict


class CriticService:
    """Critiques and comparisons for the vlm_critic node (see the module docstring).

    Args:
        make_critic: builds the critic backend (called once, on first use).
        model, robot: the MuJoCo model and robot config a rollout's trajectory is rebuilt with.
        default_task: the task when a request carries none.
        settings: merge_kinematics, keep_rollouts, rollout_dir (ServiceSettings).
    """

    def __init__(self, make_critic: Callable[[], Any], *, model, robot, default_task: str = "",
                 settings: ServiceSettings = ServiceSettings()):
        self._make_critic = make_critic
        self.model, self.robot = model, robot
        self.default_task = default_task
        self.merge_kinematics = bool(settings.merge_kinematics)
        self.rollout_dir = Path(settings.rollout_dir) if settings.rollout_dir else None
        self.kinematic = KinematicCritic()
        self._critic = None
        self._critic_error: str | None = None
        self._recent: collections.OrderedDict = collections.OrderedDict()
        self._keep = max(0, int(settings.keep_rollouts))
        self._lock = threading.Lock()
        self.rollouts_critiqued = 0

    def critic(self):
        """The backend critic, built on first use (None when it cannot be built; `critic_error` says why)."""
        if self._critic is None and self._critic_error is None:
            try:
                self._critic = self._make_critic()
            except Exception as exc:  # noqa: BLE001 - reported in every answer, the service stays up
                self._critic_error = f"cannot create the critic: {type(exc).__name__}: {exc}"
        return self._critic

    @property
    def critic_error(self) -> str | None:
        return self._critic_error

    def _name(self) -> str:
        return getattr(self._critic, "name", "critic")

    # ------------------------------------------------------------------ critique
    def critique(self, collected: CollectedRollout) -> MotionFeedback:
        """What the critic says about one collected rollout; never raises (an invalid feedback instead)."""
        task = collected.task or self.default_task
        t0 = time.perf_counter()
        with self._lock:
            self.rollouts_critiqued += 1
            index = self.rollouts_critiqued
        rollout = None
        try:
            rollout = collected.rollout(self.model, self.robot)
            feedback = self._critique(collected, rollout, task)
        except Exception as exc:  # noqa: BLE001 - every request gets an answer
            feedback = MotionFeedback.invalid(self._name(), task, f"critique failed: {type(exc).__name__}: {exc}")
        feedback.meta.update(rollout_id=collected.rollout_id, rollout_index=index,
                             critique_s=round(time.perf_counter() - t0, 4), **collected.counts())
        if collected.dropped_frames or collected.dropped_samples:
            feedback.meta.update(dropped_frames=collected.dropped_frames, dropped_samples=collected.dropped_samples)
        if rollout is not None:
            self._remember(rollout, collected.rollout_id, index, feedback)
        return feedback

    def _critique(self, collected: CollectedRollout, rollout: Rollout, task: str) -> MotionFeedback:
        critic = self.critic()
        if critic is None:
            return MotionFeedback.invalid("critic", task, self._critic_error or "no critic")
        if isinstance(critic, KinematicCritic):
            if rollout.trajectory is None:
                counts = collected.counts()
                return MotionFeedback.invalid(critic.name, task, "the kinematic critic needs joint_states and odom "
                                              f"of the rollout; got {counts['states']} joint states, "
                                              f"{counts['odom']} odom")
            return critic.critique(rollout.trajectory, task, previous_best=collected.previous_best)
        if not rollout.frames:
            return MotionFeedback.invalid(self._name(), task, "no camera frames were received for this rollout")
        feedback = critic.critique(rollout.frames, rollout.times, task,
                                   previous_best=collected.previous_best,
                                   trajectory=rollout.trajectory)
        if feedback.valid and rollout.trajectory is not None and self.merge_kinematics:
            feedback = cross_check(feedback, self.kinematic.measure(rollout.trajectory))
        return feedback

    def _remember(self, rollout: Rollout, rollout_id: Any, index: int, feedback: MotionFeedback) -> None:
        if self.rollout_dir is not None:
            name = f"{index:04d}" + (f"_{_safe(rollout_id)}" if rollout_id is not None else "")
            try:
                feedback.meta["rollout_path"] = str(rollout.save(self.rollout_dir / name))
            except OSError as exc:  # the feedback still goes out, saying why
                feedback.meta["rollout_save_error"] = f"{type(exc).__name__}: {exc}"
        if rollout_id is None or self._keep == 0:
            return
        with self._lock:
            self._recent.pop(_key(rollout_id), None)
            self._recent[_key(rollout_id)] = rollout
            while len(self._recent) > self._keep:
                self._recent.popitem(last=False)

    # ------------------------------------------------------------------ compare
    def compare(self, request: ComparisonRequest) -> Comparison:
        """The critic's comparison of the two requested rollouts; never raises (an invalid one instead)."""
        task = request.task or self.default_task
        t0 = time.perf_counter()
        try:
            comparison = self._compare(request, task)
        except Exception as exc:  # noqa: BLE001 - every request gets an answer
            comparison = Comparison.invalid(self._name(), task, f"comparison failed: {type(exc).__name__}: {exc}")
        comparison.meta.update(request_id=request.request_id, first=request.first, second=request.second,
                               compare_s=round(time.perf_counter() - t0, 4))
        return comparison

    def _compare(self, request: ComparisonRequest, task: str) -> Comparison:
        critic = self.critic()
        if critic is None:
            return Comparison.invalid("critic", task, self._critic_error or "no critic")
        rollouts = []
        for which, ref in (("first", request.first), ("second", request.second)):
            rollout, problem = self._resolve(ref)
            if problem:
                return Comparison.invalid(self._name(), task, f"{which} rollout: {problem}")
            rollouts.append(rollout)
        return critic.compare(rollouts[0], rollouts[1], task)

    def _resolve(self, ref: dict) -> tuple[Rollout | None, str | None]:
        if "path" in ref:
            try:
                return Rollout.load(ref["path"]), None
            except (OSError, ValueError, KeyError) as exc:
                return None, f"cannot load {ref['path']!r}: {exc}"
        with self._lock:
            rollout = self._recent.get(_key(ref["rollout_id"]))
            known = list(self._recent)
        if rollout is None:
            return None, (f"no recent rollout with id {ref['rollout_id']!r} (kept: {known}); "
                          "send {\"path\": ...} of a saved rollout instead")
        return rollout, None


def _key(rollout_id: Any) -> str:
    return json.dumps(rollout_id, sort_keys=True, default=str)


def _safe(rollout_id: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(rollout_id))[:64]
