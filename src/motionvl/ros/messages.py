"""MotionVL's typed messages (msg/, srv/, action/) to and from the core's records.

The nodes publish typed messages; the core keeps its dataclasses and dicts. Each pair of functions
here is the one translation of one message: `<name>_msg(...)` builds the message, `<name>_from_msg(msg)`
gives back what the core uses, validated (a message another program sent may hold anything: a mode
out of range, a JSON record of another kind or version). A `from_msg` raises `BadMessage` naming the
field; motionvl.ros.inbox logs and counts it and the node goes on.

What stays JSON on purpose travels as motionvl/msg/JsonRecord, a kind and a version: a ledger record
(search/ledger, kind "ledger") and the critic's bookkeeping (the `meta` of MotionFeedback and Comparison,
kind "critic_meta", also in the Critique and Compare results); in the training and synthesis actions' goals
and results, string fields with a version beside them (a training request, a job's outcome, a synthesis
request and its ledger record).
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
from builtin_interfaces.msg import Time

from motionvl.action import Compare, Critique, Synthesize, TrainCandidate
from motionvl.deploy.commands import PD_FIELDS
from motionvl.deploy.modes import Mode, status_from_message
from motionvl.msg import Comparison as ComparisonMsg
from motionvl.msg import DeploymentStatus, DriveCommand, JointCommand, JsonRecord, LowCommand, MotionDescriptor, MotionFeature
from motionvl.msg import MotionFeedback as MotionFeedbackMsg
from motionvl.msg import Actuation, RewardSuggestion, RolloutBoundary, SearchState, TrainerHeartbeat

JSON_VERSION = 1
"""The version of every JSON object MotionVL's messages carry (a reader refuses another)."""
LEDGER_KIND = "ledger"
CRITIC_META_KIND = "critic_meta"
MODES = tuple(m.value for m in Mode)  # DeploymentStatus.MODE_PASSIVE ... MODE_DAMP: 0 ... 3


class BadMessage(ValueError):
    """A message that cannot be used; the text names the field and why."""


def stamp(seconds: float | None = None) -> Time:
    t = time.time() if seconds is None else float(seconds)
    sec = math.floor(t)
    return Time(sec=int(sec), nanosec=min(int((t - sec) * 1e9), 999_999_999))


def seconds(t: Time) -> float:
    return t.sec + t.nanosec * 1e-9


def json_field(text: str, what: str, version: int | None = JSON_VERSION) -> dict:
    """A JSON object carried in a string field (empty: {}); BadMessage when it is not one or of another version."""
    if version is not None and version != JSON_VERSION:
        raise BadMessage(f"{what}: version {version}, this reader knows {JSON_VERSION}")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BadMessage(f"{what}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadMessage(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------- deployment status
def deployment_status_msg(status: dict, now: Time | None = None) -> DeploymentStatus:
    """The deployment node's status dict (deploy controller's mode, faults, policy, last transition)."""
    t = status.get("transition") or {}
    msg = DeploymentStatus(mode=MODES.index(status["mode"]), mode_name=status["mode"],
                           stand_complete=bool(status["stand_complete"]), faults=list(status["faults"]),
                           policy=status["policy"] or "", path=status["path"], dry_run=bool(status["dry_run"]),
                           cycle=int(status["cycle"]), transition_from=t.get("from", ""), transition_to=t.get("to", ""),
                           transition_why=t.get("why", ""), transition_cycle=int(t.get("cycle") or 0))
    msg.header.stamp = now or stamp()
    return msg


def deployment_status_from_msg(msg: DeploymentStatus) -> dict:
    """The status as the dict the deployment node builds it from (motionvl.deploy.modes.status_from_message)."""
    try:
        return status_from_message(msg)
    except ValueError as exc:
        raise BadMessage(str(exc)) from None


# ---------------------------------------------------------------------------------------- drive commands
_NAMES = {LowCommand: ("motor_names", "motor_cmd"), JointCommand: ("joint_names", "joint_cmd")}


class DriveCommandWriter:
    """One LowCommand (motor space) or JointCommand (joint space) that every command cycle fills in place:
    the names and the per-drive messages are made once, a cycle only writes their values."""

    def __init__(self, msg_type, names):
        names_field, cmd_field = _NAMES[msg_type]
        self.msg = msg_type()
        setattr(self.msg, names_field, [str(n) for n in names])
        setattr(self.msg, cmd_field, [DriveCommand() for _ in names])
        self._drives = getattr(self.msg, cmd_field)  # the message's own list (the setter may copy)

    def fill(self, q, dq, kp, kd, tau_ff, stamp_ns: int | None = None):
        """The message with these per-drive values (numpy arrays or lists, in the names' order)."""
        for d, a, b, c, e, f in zip(self._drives, q.tolist(), dq.tolist(), kp.tolist(), kd.tolist(), tau_ff.tolist()):
            d.q, d.dq, d.kp, d.kd, d.tau_ff = a, b, c, e, f
        if stamp_ns is not None:
            self.msg.header.stamp.sec, self.msg.header.stamp.nanosec = divmod(int(stamp_ns), 10**9)
        return self.msg


def drive_command_from_msg(msg, names) -> dict:
    """{field: array in the order of `names`} from a LowCommand or JointCommand. BadMessage when a name of
    `names` is missing or given twice, the lists differ in length, a value is not finite or a gain is negative.
    Names the message carries beyond `names` (other drives) are ignored."""
    names_field, cmd_field = _NAMES[type(msg)]
    got, drives = [str(n) for n in getattr(msg, names_field)], getattr(msg, cmd_field)
    if len(got) != len(drives):
        raise BadMessage(f"{len(got)} {names_field} for {len(drives)} {cmd_field}")
    where: dict = {}
    for i, n in enumerate(got):
        if n in where:
            raise BadMessage(f"{names_field}: {n!r} given twice")
        where[n] = i
    missing = [n for n in names if n not in where]
    if missing:
        raise BadMessage(f"{names_field}: no command for {missing}")
    values = np.array([[getattr(drives[where[n]], f) for f in PD_FIELDS] for n in names], dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise BadMessage(f"{cmd_field}: a value is not finite")
    out = dict(zip(PD_FIELDS, values.T.copy()))
    if np.any(out["kp"] < 0) or np.any(out["kd"] < 0):
        raise BadMessage(f"{cmd_field}: a negative gain")
    return out


# ---------------------------------------------------------------------------------------- search state
_STATE_TEXT = ("phase", "best", "candidate", "trainer_phase", "policy", "error", "task", "label", "run_dir")


def search_state_msg(state: dict) -> SearchState:
    """The search's state dict (motionvl.search.loop's on_state) as the typed message."""
    msg = SearchState(stamp=stamp(state.get("time")))
    for key in _STATE_TEXT:
        value = state.get(key)
        setattr(msg, key, "" if value is None else str(value))
    msg.iteration = -1 if state.get("iteration") is None or state.get("phase") == "training" \
        else int(state["iteration"])
    # during training the state's "iteration" is the trainer's PPO iteration of `candidate`
    msg.trainer_iteration = int(state["iteration"]) if state.get("phase") == "training" and \
        state.get("iteration") is not None else -1
    msg.candidates = [str(c) for c in state.get("candidates") or []]
    return msg


def search_state_from_msg(msg: SearchState) -> dict:
    state = {key: getattr(msg, key) or None for key in _STATE_TEXT}
    if not msg.phase:
        raise BadMessage("phase: empty")
    state.update(iteration=msg.iteration if msg.iteration >= 0 else None, candidates=list(msg.candidates),
                 trainer_iteration=msg.trainer_iteration if msg.trainer_iteration >= 0 else None,
                 time=seconds(msg.stamp))
    return state


# ---------------------------------------------------------------------------------------- ledger records
def ledger_msg(record: dict) -> JsonRecord:
    return JsonRecord(kind=LEDGER_KIND, version=JSON_VERSION, json=json.dumps(record, default=str))


def ledger_from_msg(msg: JsonRecord) -> dict:
    if msg.kind != LEDGER_KIND:
        raise BadMessage(f"kind {msg.kind!r}, expected {LEDGER_KIND!r}")
    return json_field(msg.json, "json", msg.version)


# ---------------------------------------------------------------------------------------- trainer heartbeat
def heartbeat_msg(trainer: str, candidate_id: str | None, queue_length: int, now: Time | None = None) -> TrainerHeartbeat:
    """A policy_trainer's heartbeat: its full node name, the candidate in training (None: idle), goals waiting."""
    return TrainerHeartbeat(stamp=now or stamp(), trainer=trainer, candidate_id=candidate_id or "",
                            queue_length=int(queue_length))


def heartbeat_from_msg(msg: TrainerHeartbeat) -> dict:
    """{trainer, candidate_id (None: idle), queue_length, time}: the dict the orchestrator keeps per trainer."""
    if not msg.trainer.startswith("/") or msg.trainer.strip() != msg.trainer or len(msg.trainer) < 2:
        raise BadMessage(f"trainer {msg.trainer[:80]!r}: not a node's full name")
    return {"trainer": msg.trainer, "candidate_id": msg.candidate_id or None, "queue_length": int(msg.queue_length),
            "time": seconds(msg.stamp)}


# ---------------------------------------------------------------------------------------- TrainCandidate
TRAIN_STATES = ("done", "cancelled", "failed", "rejected")
TRAIN_PHASES = ("queued", "training", "evaluating")


def train_goal(job) -> TrainCandidate.Goal:
    """The goal of a motionvl.rl.jobs.TrainingJob (its request_id stays behind: the goal's id names it)."""
    request = json.loads(job.to_json())
    cid = request.pop("candidate_id")
    request.pop("request_id", None)
    return TrainCandidate.Goal(candidate_id=cid, request_json=json.dumps(request), request_version=JSON_VERSION)


def job_from_goal(goal: TrainCandidate.Goal, request_id: str | None = None):
    """The TrainingJob a goal asks for, validated as a request on the old topic was (BadMessage says what is
    wrong); request_id: the trainer's name for it (the goal's id)."""
    from motionvl.rl.jobs import JobError, TrainingJob

    raw = json_field(goal.request_json, "request_json", goal.request_version)
    for key in ("candidate_id", "request_id"):
        if key in raw:
            raise BadMessage(f"request_json: {key!r} is not taken there (the goal's candidate_id and id name the "
                             "request)")
    try:
        job = TrainingJob.from_json(json.dumps({"candidate_id": goal.candidate_id, **raw}))
    except (JobError, TypeError, ValueError) as exc:
        raise BadMessage(str(exc)) from None
    job.request_id = request_id
    return job


def train_feedback_msg(phase: str, record: dict | None = None) -> TrainCandidate.Feedback:
    """Feedback of a phase change (iteration -1: none yet) or of one PPO iteration's history record."""
    record = record or {}
    return TrainCandidate.Feedback(phase=phase, iteration=int(record.get("iteration", -1)),
                                   steps_per_s=_nan_for_none(record.get("steps_per_s")),
                                   mean_reward=_nan_for_none(record.get("mean_return")),
                                   mean_episode_length=_nan_for_none(record.get("mean_episode_length")))


def train_feedback_from_msg(msg: TrainCandidate.Feedback) -> dict:
    """{phase, iteration (None: not yet), steps_per_s, mean_reward, mean_episode_length (None: not known)}."""
    if msg.phase not in TRAIN_PHASES:
        raise BadMessage(f"phase {msg.phase[:40]!r}, expected one of {TRAIN_PHASES}")
    return {"phase": msg.phase, "iteration": None if msg.iteration < 0 else int(msg.iteration),
            **{k: _none_for_nan(getattr(msg, k), k) for k in ("steps_per_s", "mean_reward", "mean_episode_length")}}


def train_result_msg(state: str, message: str = "", outcome: dict | None = None,
                     term_stats: dict | None = None) -> TrainCandidate.Result:
    """The result of a goal; outcome: run_job's outcome without term_stats (state done or cancelled)."""
    outcome = outcome or {}
    return TrainCandidate.Result(
        state=state, message=message, policy_path=str(outcome.get("policy_path") or ""),
        run_dir=str(outcome.get("run_dir") or ""), iterations=int(outcome.get("iterations") or 0),
        outcome_json=json.dumps(outcome, default=float) if outcome else "",
        term_stats_json=json.dumps(term_stats, default=float) if term_stats else "", version=JSON_VERSION)


def train_result_from_msg(msg: TrainCandidate.Result) -> dict:
    """{state, message, outcome}: outcome is run_job's outcome with term_stats (None unless done or cancelled)."""
    if msg.state not in TRAIN_STATES:
        raise BadMessage(f"state {msg.state[:40]!r}, expected one of {TRAIN_STATES}")
    outcome = json_field(msg.outcome_json, "outcome_json", msg.version)
    term_stats = json_field(msg.term_stats_json, "term_stats_json", msg.version)
    return {"state": msg.state, "message": msg.message,
            "outcome": {**outcome, "term_stats": term_stats} if outcome else None}


# ---------------------------------------------------------------------------------------- Synthesize
def synthesize_goal(request) -> Synthesize.Goal:
    """The goal of a motionvl.synth.SynthesisRequest."""
    return Synthesize.Goal(request_json=json.dumps(request.to_dict(), default=str), request_version=JSON_VERSION)


def synthesis_request_from_goal(goal: Synthesize.Goal):
    """The SynthesisRequest a goal asks for (BadMessage says what is wrong)."""
    from motionvl.synth import SynthesisError, SynthesisRequest

    raw = json_field(goal.request_json, "request_json", goal.request_version)
    try:
        return SynthesisRequest.from_dict(raw)
    except (SynthesisError, TypeError, ValueError) as exc:
        raise BadMessage(f"request_json: {exc}") from None


def synthesize_result_msg(record: dict, cap_reached: bool = False) -> Synthesize.Result:
    """The result of a goal: the call's ledger record (motionvl.synth.replay), its counts and error."""
    candidates = record.get("candidates") or []
    return Synthesize.Result(record_json=json.dumps(record, default=str) if record else "",
                             record_version=JSON_VERSION, candidates=len(candidates),
                             candidates_ok=sum(1 for c in candidates if c.get("ok")), cap_reached=bool(cap_reached),
                             error=str(record.get("error") or ""))


def synthesize_result_from_msg(msg: Synthesize.Result) -> dict:
    """The ledger record of the call with cap_reached (what the search appends to its ledger)."""
    return {**json_field(msg.record_json, "record_json", msg.record_version), "cap_reached": bool(msg.cap_reached)}


# ---------------------------------------------------------------------------------------- the critic's answers
def critic_meta_msg(meta: dict) -> JsonRecord:
    return JsonRecord(kind=CRITIC_META_KIND, version=JSON_VERSION, json=json.dumps(meta, default=str))


def critic_meta_from_msg(record: JsonRecord) -> dict:
    """The bookkeeping object; a message built by hand may leave the record empty (no bookkeeping)."""
    if not record.kind and not record.json:
        return {}
    if record.kind != CRITIC_META_KIND:
        raise BadMessage(f"meta.kind {record.kind[:40]!r}, expected {CRITIC_META_KIND!r}")
    return json_field(record.json, "meta.json", record.version)


def _nan_for_none(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _none_for_nan(value: float, what: str) -> float | None:
    """NaN: none stated; any other value must be finite."""
    if math.isnan(value):
        return None
    if not math.isfinite(value):
        raise BadMessage(f"{what}: {value!r} is not finite (NaN means none)")
    return float(value)


_BETTER = {None: MotionFeedbackMsg.UNKNOWN, True: MotionFeedbackMsg.BETTER, False: MotionFeedbackMsg.NOT_BETTER}
_BETTER_BACK = {v: k for k, v in _BETTER.items()}


def feedback_msg(feedback, now: Time | None = None) -> MotionFeedbackMsg:
    """A motionvl.critic.schema.MotionFeedback as motionvl/MotionFeedback (None text: empty, None number: NaN)."""
    msg = MotionFeedbackMsg(
        critic=feedback.critic, task=feedback.task, alignment_score=float(feedback.alignment_score),
        descriptors=[MotionDescriptor(label=d.label, region=d.region, value=_nan_for_none(d.value), unit=d.unit or "",
                                      confidence=float(d.confidence), note=d.note,
                                      measured_value=_nan_for_none(d.measured_value), contradiction=d.contradiction)
                     for d in feedback.descriptors],
        features=[MotionFeature(label=label, confidence=float(c)) for label, c in feedback.features],
        suggestions=[RewardSuggestion(term=s.term, direction=s.direction, reason=s.reason)
                     for s in feedback.suggestions],
        better_than_best=_BETTER[feedback.better_than_best], unjudged=list(feedback.unjudged), valid=feedback.valid,
        error=feedback.error or "", raw_text=feedback.raw_text or "", meta=critic_meta_msg(feedback.to_dict()["meta"]))
    msg.header.stamp = now or stamp()
    return msg


def feedback_from_msg(msg: MotionFeedbackMsg):
    """The motionvl.critic.schema.MotionFeedback a message carries, checked by the schema (else BadMessage)."""
    from motionvl.critic.schema import MotionFeedback, SchemaError

    if msg.better_than_best not in _BETTER_BACK:
        raise BadMessage(f"better_than_best: {msg.better_than_best} is not UNKNOWN, BETTER or NOT_BETTER")
    record = {
        "critic": msg.critic, "task": msg.task, "alignment_score": msg.alignment_score,
        "descriptors": [{"label": d.label, "region": d.region, "value": _none_for_nan(d.value, f"descriptors[{i}].value"),
                         "unit": d.unit or None, "confidence": d.confidence, "note": d.note,
                         "measured_value": _none_for_nan(d.measured_value, f"descriptors[{i}].measured_value"),
                         "contradiction": bool(d.contradiction)} for i, d in enumerate(msg.descriptors)],
        "features": [[f.label, f.confidence] for f in msg.features],
        "suggestions": [{"term": s.term, "direction": s.direction, "reason": s.reason} for s in msg.suggestions],
        "better_than_best": _BETTER_BACK[msg.better_than_best], "unjudged": list(msg.unjudged),
        "valid": bool(msg.valid), "error": msg.error or None, "raw_text": msg.raw_text or None,
        "meta": critic_meta_from_msg(msg.meta)}
    try:
        return MotionFeedback.from_dict(record)
    except (SchemaError, TypeError) as exc:
        raise BadMessage(str(exc)) from None


def comparison_msg(comparison, now: Time | None = None) -> ComparisonMsg:
    """A motionvl.critic.schema.Comparison as motionvl/Comparison (an abstention: preferred empty)."""
    msg = ComparisonMsg(preferred=comparison.preferred or "", confidence=float(comparison.confidence),
                        reason=comparison.reason, valid=comparison.valid, critic=comparison.critic,
                        task=comparison.task, error=comparison.error or "", raw_text=comparison.raw_text or "",
                        meta=critic_meta_msg(comparison.to_dict()["meta"]))
    msg.header.stamp = now or stamp()
    return msg


def comparison_from_msg(msg: ComparisonMsg):
    """The motionvl.critic.schema.Comparison a message carries, checked by the schema (else BadMessage)."""
    from motionvl.critic.schema import Comparison, SchemaError

    record = {"preferred": msg.preferred or None, "confidence": msg.confidence, "reason": msg.reason,
              "valid": bool(msg.valid), "critic": msg.critic, "task": msg.task, "error": msg.error or None,
              "raw_text": msg.raw_text or None, "meta": critic_meta_from_msg(msg.meta)}
    try:
        return Comparison.from_dict(record)
    except (SchemaError, TypeError) as exc:
        raise BadMessage(str(exc)) from None


# ---------------------------------------------------------------------------------------- rollouts and their critique
_EVENTS = {"start": RolloutBoundary.START, "end": RolloutBoundary.END}
_EVENTS_BACK = {v: k for k, v in _EVENTS.items()}


def boundary_msg(boundary, now: Time | None = None) -> RolloutBoundary:
    """A motionvl.critic.rollouts.Boundary (its previous_best travels in the Critique goal) as motionvl/RolloutBoundary."""
    msg = RolloutBoundary(event=_EVENTS[boundary.event], rollout_id=_text(boundary.rollout_id), task=boundary.task or "",
                          command=[float(c) for c in boundary.command or ()])
    msg.header.stamp = now or stamp()
    return msg


def boundary_from_msg(msg: RolloutBoundary):
    """The Boundary a message marks (BadMessage: an unknown event, a command not [vx, vy, yaw_rate] of finite values)."""
    from motionvl.critic.rollouts import Boundary

    if msg.event not in _EVENTS_BACK:
        raise BadMessage(f"event: {msg.event} is not START ({RolloutBoundary.START}) or END ({RolloutBoundary.END})")
    command = [float(c) for c in msg.command]
    if command and (len(command) != 3 or not all(math.isfinite(c) for c in command)):
        raise BadMessage(f"command: {len(command)} values, expected none or 3 finite ones [vx, vy, yaw_rate]")
    return Boundary(_EVENTS_BACK[msg.event], msg.task, msg.rollout_id or None, tuple(command) if command else None)


def critique_goal(rollout_id, task: str = "", previous_best: dict | None = None) -> Critique.Goal:
    """A Critique goal: the rollout's id (None: what has been collected so far), the task, r*'s feedback dict."""
    from motionvl.critic.schema import MotionFeedback

    goal = Critique.Goal(rollout_id=_text(rollout_id), task=task or "", has_previous_best=previous_best is not None)
    if previous_best is not None:
        goal.previous_best = feedback_msg(MotionFeedback.from_dict(previous_best))
    return goal


def critique_request_from_goal(goal: Critique.Goal) -> tuple[str | None, str, dict | None]:
    """(rollout id or None, task, previous best as a MotionFeedback dict or None); BadMessage naming the field."""
    previous = None
    if goal.has_previous_best:
        try:
            previous = feedback_from_msg(goal.previous_best).to_dict()
        except BadMessage as exc:
            raise BadMessage(f"previous_best: {exc}") from None
    return goal.rollout_id or None, goal.task, previous


def compare_goal(request) -> Compare.Goal:
    """A Compare goal of a motionvl.critic.service.ComparisonRequest (its request_id stays with the caller)."""
    goal = Compare.Goal(task=request.task or "")
    for which in ("first", "second"):
        ref = getattr(request, which)
        setattr(goal, f"{which}_rollout_id", _text(ref.get("rollout_id")))
        setattr(goal, f"{which}_path", _text(ref.get("path")))
    return goal


def comparison_request_from_goal(goal: Compare.Goal, request_id=None):
    """The ComparisonRequest a goal asks for; BadMessage unless each rollout is named by exactly one of id or path."""
    from motionvl.critic.service import ComparisonRequest

    refs = []
    for which in ("first", "second"):
        rollout_id, path = getattr(goal, f"{which}_rollout_id"), getattr(goal, f"{which}_path")
        if bool(rollout_id) == bool(path):
            raise BadMessage(f"{which}: give exactly one of {which}_rollout_id and {which}_path, got "
                             f"{rollout_id[:80]!r} and {path[:80]!r}")
        refs.append({"rollout_id": rollout_id} if rollout_id else {"path": path})
    return ComparisonRequest(request_id, goal.task, *refs)


def _text(value) -> str:
    return "" if value is None else str(value)


# ---------------------------------------------------------------------------------------- the simulator's actuators
ACTUATIONS = ("pd", "torque", "drive", "damping")  # Actuation.PD ... DAMPING: 0 ... 3


def actuation_msg(regime: str, now: Time | None = None) -> Actuation:
    msg = Actuation(regime=ACTUATIONS.index(regime), regime_name=regime)
    msg.header.stamp = now or stamp()
    return msg


def actuation_from_msg(msg: Actuation) -> str:
    """'pd', 'torque', 'drive' or 'damping' (BadMessage: a regime out of range)."""
    if msg.regime >= len(ACTUATIONS):
        raise BadMessage(f"regime: {msg.regime} is not one of PD, TORQUE, DRIVE, DAMPING (0-3)")
    return ACTUATIONS[msg.regime]
