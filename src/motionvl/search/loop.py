"""The reward search: the paper's Algorithm 1 with MoVLR's judge, written as ledger steps.

    start   the reference reward (RL-Base) and its policy: trained here (base_iterations) or a given run
    repeat N iterations:
      propose   K candidates from the synthesizer: mutations of r* with its per-term statistics, task
                scores and (mode synth+critic) the critic's feedback
      validate  each in the sandbox before it costs training; a rejection is recorded with its message
      train     on the trainers (warm-started from r*'s run by default), each with a wall-clock limit and
                a heartbeat; then the reward-free evaluation on held-out randomised episodes
      play      each trained candidate back (not while others train, unless configured) and critique it
      decide    gates, ranking, pairwise judgement against r* (motionvl.search.decision); r* stays or moves
    final   the winner trained final_iterations longer, evaluated, played back, critiqued, exported

Every step is `Ledger.once(kind, key, ...)`: a resumed search (after a crash, kill -9 or full disk)
replays the recorded steps and continues at the first one missing; a candidate whose training was cut
resumes from its run's checkpoint. Mode `reference` trains the reference reward alone for the whole
budget (SearchConfig.total_iterations) and skips the iterations.

Model answers are untrusted: a candidate is checked on the run's own training environment (its
num_envs and overrides) and may not change r*'s scale or only_positive; a model critic's claims are
cross-checked with the rollout's kinematics (motionvl.critic.crosscheck) before its alignment ranks
anything; the synthesizer's and the critic's model use is counted over the ledger and capped
(LimitConfig.max_synth_* / max_critic_*), so a resumed run keeps its caps.

Run directory: ledger.jsonl, search.json (the settings), candidates/<id>/ (each candidate's training run,
playback/ and its critic feedback), policy.onnx + reward_spec.yaml (the exported result), report.*.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import threading
import time
from pathlib import Path
from typing import Callable

from motionvl.critic import Rollout
from motionvl.llm.usage import cap_measures, totals
from motionvl.rewards import validate_spec
from motionvl.rewards.spec import RewardSpec, RewardSpecError, load_reward_spec, reward_key
from motionvl.rl.jobs import OUTCOME_FILE, TrainingJob
from motionvl.robot import ConfigError
from motionvl.search import deps
from motionvl.backend_names import KINDS, MODEL_SYNTHESIZERS, RECORDED
from motionvl.search.config import MODES, GateConfig, SearchConfig, mode_label
from motionvl.search.decision import choose_start, decide, failures_against, gate_failures
from motionvl.search.dispatch import STOPPED, Dispatcher, SlotState
from motionvl.search.ledger import LEDGER_FILE, Ledger
from motionvl.search.lineage import code_version
from motionvl.search.playback import CritiqueRequest, Playback, PlaybackResult
from motionvl.synth import SynthesisRequest, usage_totals
from motionvl.task import Task, make_task
from motionvl.synth.api import REQUEST_GATES, fixed_field_problem

START, FINAL = "start", "final"
SETTINGS_FILE = "search.json"
BACKEND_KEYS = ("synthesizer", "critic", *(f"{kind}_{name}" for kind in KINDS for name in RECORDED), "replay")
"""Settings that say which models answer: a resume restores them and refuses another unless allowed."""
REWARD_KEY_VERSION = 2
"""Recorded with new runs: duplicates and the exported reward_spec_hash use motionvl.rewards.spec.reward_key (an
older run used a hash of the spec file and a fingerprint that ignored the scale)."""
EVALUATION_SUMMARY_KEYS = ("success_rate", "fell_fraction", "task_score", "forward_distance_m", "mean_speed_mps",
                           "tracking_error_mps", "heading_error_deg", "knee_angle_stance_deg", "torso_pitch_deg",
                           "step_frequency_hz", "swing_clearance_m", "stance_slip_mps", "episodes", "command",
                           "drift_mps", "yaw_rate_steady_rps", "heading_turned_deg", "double_support_fraction")


class SearchError(RuntimeError):
    """The search cannot go on (no start policy, a run directory in use); the message says why."""


class SearchStopped(RuntimeError):
    """The search was asked to stop (`Search.stop()`): it ended at a step boundary; resume continues it."""


def training_overrides(cfg: SearchConfig, task: Task | None = None, train_config: str | None = None) -> list[str]:
    """The training config overrides every run of a search trains with (its seed, its task's env settings, command
    distribution, terrain and the task itself, environments and the preset's overrides, which win); a baseline
    trained beside the search uses the same. `train_config`: the training YAML whose command ranges the task's
    share of commands leaves to the rest (None: the package's)."""
    task_overrides = []
    if task is not None:
        from motionvl.rl.config import TrainConfig

        commands = TrainConfig.from_yaml(train_config or None, overrides=tuple(cfg.training_overrides)).env.commands
        start = (commands.start_vx, commands.start_vy, commands.start_yaw_rate) if commands.curriculum else None
        task_overrides = task.training_overrides(cfg.task_share, (commands.vx, commands.vy, commands.yaw_rate), start)
    return ([f"seed={cfg.seed}", *task_overrides, *cfg.training_overrides]
            + ([f"env.num_envs={cfg.num_envs}"] if cfg.num_envs else []))


@dataclasses.dataclass
class SearchSettings:
    """What a run is (recorded in the ledger and search.json; a resumed run keeps them)."""

    task: str
    mode: str = "synth+critic"
    synthesizer: str = "rules"
    critic: str = "kinematic"
    preset: str = "quick"
    config: dict = dataclasses.field(default_factory=dict)
    """SearchConfig.to_dict()."""
    train_config: str | None = None
    """Training YAML (None: the package's config/training.yaml)."""
    robot_config: str | None = None
    """Robot YAML the trainers, evaluations and playbacks of the run use (None: the package's config/robot.yaml)."""
    start_run: str | None = None
    """An existing training run of the reference reward to start from instead of training one."""
    reference_spec: str | None = None
    """The start's reward spec file (None: config/rewards/reference.yaml)."""
    synth_model: str | None = None
    """The synthesizer's model: openai, its name; transformers, its directory (a resume asks the same one)."""
    synth_base_url: str | None = None
    """The openai synthesizer's endpoint (recorded without credentials; API keys come from the environment only)."""
    critic_model: str | None = None
    """The critic's model: openai, its name; transformers, its directory."""
    critic_base_url: str | None = None
    """The openai critic's endpoint (recorded without credentials)."""
    replay: str | None = None
    """The replay synthesizer's recorded run directory."""

    @property
    def label(self) -> str:
        return mode_label(self.mode, self.synthesizer if self.mode != "reference" else None,
                          self.critic if self.mode == "synth+critic" else None)

    def validate(self) -> "SearchSettings":
        for key in (f"{kind}_base_url" for kind in KINDS):
            setattr(self, key, without_credentials(getattr(self, key)))
        if not isinstance(self.task, str) or not self.task.strip() or not any(c.isalpha() for c in self.task):
            raise ConfigError(f"the task sentence is empty or has no words: {self.task!r}")
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; modes: {list(MODES)}")
        SearchConfig.from_dict(self.config)
        check_terrain(self.task_object(), self.robot())
        return self

    def task_object(self) -> Task:
        """The run's task (motionvl.task): the sentence read with the settings' `command`; a sentence the rules do
        not understand is a TaskError unless a model synthesizer proposes for it and a command is given."""
        cfg = SearchConfig.from_dict(self.config)
        model = self.mode != "reference" and self.synthesizer in (*MODEL_SYNTHESIZERS, "replay")
        return make_task(self.task, command=cfg.command, allow_unjudged=model,
                         success_fraction=cfg.evaluation.success_fraction)

    def robot(self):
        """The run's RobotConfig (ConfigError naming what is wrong with its robot YAML)."""
        from motionvl.robot import load_robot_config

        return load_robot_config(self.robot_config)


def recorded_training_overrides(run_dir: str | Path) -> list[str]:
    """The training overrides of the search recorded in `run_dir` (its task's included): what a baseline trained
    beside it uses to train as its runs did."""
    recorded = Ledger(run_dir).get("run", "settings")
    if recorded is None:
        raise SearchError(f"{run_dir} holds no search")
    settings = SearchSettings(**{k: recorded[k] for k in SearchSettings.__dataclass_fields__ if k in recorded})
    return training_overrides(SearchConfig.from_dict(settings.config), recorded_task(recorded, settings),
                              settings.train_config)


def recorded_task(recorded: dict | None, settings: SearchSettings) -> Task:
    """The task a run was started with (its ledger's task record), so that a resume commands, trains and judges as
    its first session did even when the sentence rules changed since; a new run, or one recorded before the task
    record, reads its sentence."""
    raw = (recorded or {}).get("task_object")
    return Task.from_dict(raw) if isinstance(raw, dict) else settings.task_object()


def run_task(run_dir: str | Path, settings: SearchSettings) -> Task:
    """The task of the search in run_dir: as recorded when it resumes one, else read from the settings."""
    recorded = Ledger(run_dir).get("run", "settings") if (Path(run_dir) / LEDGER_FILE).exists() else None
    return recorded_task(recorded, settings)


def check_terrain(task: Task, robot) -> None:
    """ConfigError before anything trains when this installation cannot build the task's terrain."""
    if task.terrain == "flat":
        return
    from motionvl.sim.model import TerrainConfig, build_model, single_floor

    try:
        build_model(robot, single_floor(TerrainConfig(kind=task.terrain, level=task.terrain_level)))
    except ConfigError as exc:
        raise ConfigError(f"the task {task.sentence!r} asks for terrain {task.terrain!r}, which this installation "
                          f"cannot build: {exc}") from exc


def without_credentials(url: str | None) -> str | None:
    """An endpoint URL as it may be recorded: without user:password@ and query parameters (keys some APIs take)."""
    if not url:
        return url or None
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def recorded_settings(ledger: Ledger) -> dict | None:
    """A run's settings as recorded, with the backend changes of later sessions (--allow-backend-change) applied."""
    recorded = ledger.get("run", "settings")
    if recorded is None:
        return None
    out = dict(recorded)
    for key, data in ledger.items("run"):
        if key.startswith("backend-change"):
            out.update({k: v["to"] for k, v in data.items() if k in BACKEND_KEYS and isinstance(v, dict)})
    return out


def critic_usage(ledger: Ledger) -> dict:
    """What the critic's model calls used over a run (critiques, comparisons), from its ledger."""
    parts = [((d.get("meta") or {}).get("usage") or {}) for _, d in ledger.items("critiqued")]
    for _, d in ledger.items("compared"):
        parts += [(d.get(order) or {}).get("usage") or {} for order in ("challenger_first", "best_first")]
    return totals(parts)


class Search:
    """One search run in `run_dir` (see the module docstring). Backends are passed in: a synthesizer
    (motionvl.synth), a critic (motionvl.critic), a Playback and the trainers (`slots()` -> TrainerSlots)."""

    def __init__(self, run_dir: str | Path, settings: SearchSettings, *, synthesizer=None, critic=None,
                 playback: Playback, slots: Callable[[], list], resume: bool = False,
                 log: Callable[[str], None] = print, progress: bool = True,
                 on_record: Callable[[dict], None] | None = None, on_state: Callable[[dict], None] | None = None,
                 no_trainer_s: float = 0.0, allow_backend_change: bool = False):
        """synthesizer: a motionvl.synth RewardSynthesizer (`propose`), or an object whose `propose_record(request)`
        returns the synthesis record itself (the orchestrator's client of the reward_synthesizer node).
        on_record(record): every ledger record as written; on_state(state): the loop's state as it changes.
        no_trainer_s: how long training waits for a trainer to appear before its jobs fail.
        allow_backend_change: a resume may switch backends, models or endpoints (recorded in the ledger)."""
        self.run_dir = Path(run_dir)
        self.settings = settings.validate()
        self.robot = settings.robot()
        self.cfg = SearchConfig.from_dict(settings.config)
        self.task = settings.task_object()
        self.train_overrides = training_overrides(self.cfg, self.task, settings.train_config)
        self.synthesizer, self.critic, self.playback, self.slots = synthesizer, critic, playback, slots
        self.log, self.progress = log, progress
        self.on_state, self.no_trainer_s = on_state or (lambda state: None), float(no_trainer_s)
        self._stop = threading.Event()
        self.use_critic = settings.mode == "synth+critic"
        if settings.mode != "reference" and synthesizer is None:
            raise ConfigError(f"mode {settings.mode!r} needs a synthesizer")
        if self.use_critic and critic is None:
            raise ConfigError("mode 'synth+critic' needs a critic")
        self.allow_backend_change = bool(allow_backend_change)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.run_dir)
        self.ledger = Ledger(self.run_dir, on_append=on_record)
        try:
            self._open(resume)
        except BaseException:
            self._lock.close()
            raise
        budget = getattr(synthesizer, "budget", None)
        if budget is not None:  # what earlier sessions of the run used counts against the synthesizer's cap
            budget.restore(**usage_totals([data for _, data in self.ledger.items("synthesis")]))
        budget = getattr(critic, "budget", None)
        if budget is not None and hasattr(budget, "restore"):  # the same for the critic's
            budget.restore(**cap_measures(critic_usage(self.ledger)))
        self.records: dict[str, dict] = {}
        self._bars: dict = {}
        self._environment = None

    # ------------------------------------------------------------------ run directory
    def _open(self, resume: bool) -> None:
        recorded = recorded_settings(self.ledger)
        mine = dataclasses.asdict(self.settings)
        if recorded is None:
            if resume:
                raise SearchError(f"cannot resume: {self.run_dir} holds no search (no {self.ledger.path.name})")
            # what the graph's other nodes make before the search starts: the lock, logs, bags, an empty candidates/
            foreign = [p for p in self.run_dir.iterdir() if p.name not in (".lock", "logs", "bags", "candidates")
                       or (p.name == "candidates" and any(p.iterdir()))]
            if foreign:
                raise SearchError(f"{self.run_dir} is not empty and holds no search ({foreign[0].name}); "
                                  "use a new directory")
            self.ledger.append("run", "settings", {**mine, "label": self.settings.label, "code_version": code_version(),
                                                   "task_object": self.task.to_dict(),
                                                   "reward_key": REWARD_KEY_VERSION})
            (self.run_dir / SETTINGS_FILE).write_text(json.dumps(mine, indent=1))
            return
        if not resume:
            raise SearchError(f"{self.run_dir} already holds a search; pass --resume to continue it or use a new directory")
        differ = [k for k in mine if k != "config" and k not in BACKEND_KEYS and recorded.get(k) != mine[k]]
        if recorded.get("config") != mine["config"]:
            differ.append("config")
        if differ:
            raise SearchError(f"cannot resume {self.run_dir} with other settings ({', '.join(differ)} differ from the "
                              f"recorded ones in {SETTINGS_FILE}); resume with the same settings or start a new run")
        switched = {k: {"from": recorded.get(k), "to": mine[k]} for k in BACKEND_KEYS if recorded.get(k) != mine[k]}
        if switched and not self.allow_backend_change:
            raise SearchError(f"cannot resume {self.run_dir} with other models or endpoints ("
                              + ", ".join(f"{k} {v['from']!r} -> {v['to']!r}" for k, v in switched.items())
                              + "): one run would mix two models. Resume without them (the recorded ones are used) "
                              "or pass --allow-backend-change to switch, which the ledger records")
        self._check_recorded_specs()
        task = recorded_task(recorded, self.settings)
        if task.to_dict() != self.task.to_dict():
            self.log(f"task: kept as recorded ({task.describe(self.cfg.evaluation.seconds)}); this version reads the "
                     f"sentence as {self.task.describe(self.cfg.evaluation.seconds)}")
            self.task = task
            self.train_overrides = training_overrides(self.cfg, task, self.settings.train_config)
        finished = self.ledger.get("run", "finished") is not None
        changes = sum(1 for r in self.ledger.records if r["kind"] == "run" and r["key"].startswith("backend-change"))
        if switched and not finished:
            self.ledger.append("run", f"backend-change-{changes + 1}", switched)
            self.log("backends changed on resume (recorded): " + ", ".join(f"{k} {v['from']!r} -> {v['to']!r}"
                                                                            for k, v in switched.items()))
        if self.ledger.get("run", "settings").get("reward_key") != REWARD_KEY_VERSION and not finished:
            self.log("note: this run was recorded before reward_key; its duplicate checks and exported reward_spec_hash "
                     "now use motionvl.rewards.spec.reward_key (the scale and only_positive count)")
        sessions = sum(1 for r in self.ledger.records if r["kind"] == "run" and r["key"].startswith("resumed"))
        if not finished:
            self.ledger.append("run", f"resumed-{sessions + 1}", {"steps_recorded": len(self.ledger.records)})
        self.log(f"resuming {self.run_dir}: {len(self.ledger.records)} steps recorded")

    def _check_recorded_specs(self) -> None:
        """SearchError naming the change when a recorded spec the run may train or rebuild no longer passes the
        spec rules (bounds added since it was recorded)."""
        start = self.ledger.get("start", START)
        specs = [(START, start["spec"])] if start else []
        for _, proposal in self.ledger.items("synthesis"):
            specs += [(cid, c["spec"]) for cid, c in zip(proposal.get("ids") or [], proposal.get("candidates") or [])
                      if c.get("ok") and c.get("spec") is not None]
        for cid, spec in specs:
            try:
                RewardSpec.from_dict(spec, where=f"recorded spec of {cid}")
            except RewardSpecError as exc:
                raise SearchError(f"cannot resume {self.run_dir}: {exc}. Reward specs are bounded now (scale within "
                                  f"[0.1, 10], term parameters within +-1e4, motionvl.rewards.spec) and this run recorded "
                                  "one outside: start a new run") from None

    def stop(self) -> None:
        """Ask the search to end at its next step (from any thread); run() then raises SearchStopped."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise SearchStopped(f"the search in {self.run_dir} was stopped; resume continues it")

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._lock.close()

    # ------------------------------------------------------------------ the algorithm
    def run(self) -> dict:
        try:
            self.log(f"task: {self.task.describe(self.cfg.evaluation.seconds)}"
                     + (f"; not understood: {'; '.join(self.task.unjudged)}" if self.task.unjudged else ""))
            best = self._start()
            if self.settings.mode != "reference":
                for it in range(1, self.cfg.iterations + 1):
                    self._check_stop()
                    best = self._iteration(it, best)
                final = self._final(best)
            else:
                final = best
            self._check_stop()
            exported = self.ledger.once("exported", "policy", lambda: self._export(final, best))
            chosen = self.records.get(exported["candidate"], final)
            self._film(chosen)
            self._table_rows(self.records[START], chosen)
            summary = {"label": self.settings.label, "best": best["id"], "final": final["id"], **exported}
            self.ledger.once("run", "finished", lambda: summary)
            self._write_report()
            self._state("finished", best=best["id"], policy=exported["policy"])
            return summary
        finally:
            self.close()

    def _start(self) -> dict:
        if self._samples_start():
            sampled = self._sampled_start()
            if sampled is not None:
                return sampled
        spec, origin = self._start_spec()
        record = {"id": START, "iteration": 0, "parent": None, "spec": spec, "diff": [], "origin": origin}
        self.ledger.once("start", START, lambda: {"spec": spec, "start_run": self.settings.start_run, "origin": origin})
        if self.settings.start_run:
            self.ledger.once("trained", START, lambda: self._adopt_start_run(Path(self.settings.start_run)))
        else:
            failed = self.ledger.get("trained", START)
            if failed is not None and not failed["ok"]:  # it ended an earlier session: a resume tries again
                self.ledger.retry("trained", START, f"resumed after: {failed['reason']}")
                self.log(f"start: its training failed in an earlier session ({failed['reason']}); training it again "
                         "from its last checkpoint")
            iterations = self.cfg.total_iterations if self.settings.mode == "reference" else self.cfg.base_iterations
            self._train_all([self._job(START, spec, iterations, warm_start=None, final=True)])
        self._complete(record)
        if record.get("failed"):
            raise SearchError(f"the start policy (reference reward) failed: {record['failed']}")
        if self.use_critic and not (record.get("feedback") or {}).get("valid"):
            self.log(f"warning: the critic could not judge the start policy: {(record.get('feedback') or {}).get('error')}")
        self.log(f"start: {_scores_line(record)}")
        return record

    def _start_spec(self) -> tuple[dict, str]:
        """The start's reward spec and where it comes from: the given reference spec, the shipped reference when it
        fits the task, else a start composed for the task from the term library (the paper's category (ii))."""
        recorded = self.ledger.get("start", START)
        if recorded is not None:  # a resumed run keeps its start
            return recorded["spec"], recorded.get("origin", "reference")
        if self.settings.reference_spec or self.task.reference_fits or self.settings.start_run:
            spec = load_reward_spec(self.settings.reference_spec) if self.settings.reference_spec else load_reward_spec()
            return spec.to_dict(), "reference"
        from motionvl.synth.compose import compose_start

        spec = compose_start(self.task)
        self.log(f"start: no shipped reference reward fits {self.task.motion!r} on {self.task.terrain} ground; "
                 f"composed {spec.name} from the term library")
        return spec.to_dict(), "composed"

    def _samples_start(self) -> bool:
        """Category (ii) with a model synthesizer: the start is the best of K rewards sampled from scratch."""
        return (not self.task.reference_fits and not self.settings.reference_spec and not self.settings.start_run
                and self.settings.mode != "reference" and self.settings.synthesizer in (*MODEL_SYNTHESIZERS, "replay")
                and (self.ledger.get("start", START) or {}).get("origin", "sampled") == "sampled")

    def _sampled_start(self) -> dict | None:
        """K rewards sampled from scratch for the task (synthesis i0), each trained for base_iterations from scratch,
        evaluated, played back and critiqued; the best by the gates and the ranking becomes the start (its records
        copied under the id `start`). None when no sample trained: the composed start then."""
        proposal = self._propose(0, None)
        samples, jobs = [], []
        for cid, c in zip(proposal["ids"], proposal["candidates"]):
            record = {"id": cid, "iteration": 0, "parent": None, "spec": c.get("spec"), "diff": [],
                      "origin": self.settings.synthesizer}
            if not c.get("ok") or c.get("spec") is None:
                record["failed"] = f"the synthesizer's answer was rejected: {c.get('rejection') or 'no spec'}"
            else:
                check = self.ledger.once("validated", cid, lambda c=c: self._validate(c["spec"], None))
                if not check["ok"]:
                    record["failed"] = f"the sandbox refused it: {check['error']}"
                else:
                    jobs.append(self._job(cid, c["spec"], self.cfg.base_iterations, warm_start=None))
            samples.append(record)
        self._train_all(jobs)
        for record in samples:
            if not record.get("failed"):
                self._complete(record)
        choice = self.ledger.once("chosen", START, lambda: choose_start(
            samples, gates=self.cfg.gates, ranking=self.cfg.ranking, use_critic=self.use_critic))
        for record in samples:
            self.records[record["id"]] = record
        for cid, verdict in choice["verdicts"].items():
            self.log(f"  {cid}: {verdict['outcome']} - {verdict['reason']}")
        if choice["winner"] is None:
            self.log(f"start: no sampled reward trained ({choice['summary']}); the composed start instead")
            return None
        winner = self.records[choice["winner"]]
        self.ledger.once("start", START, lambda: {"spec": winner["spec"], "start_run": None, "origin": "sampled",
                                                  "candidate": winner["id"]})
        for kind in ("trained", "played", "critiqued"):  # the start is the winner: its records under the start's id
            data = self.ledger.get(kind, winner["id"])
            if data is not None:
                self.ledger.once(kind, START, lambda data=data: data)
        record = {"id": START, "iteration": 0, "parent": None, "spec": winner["spec"], "diff": [], "origin": "sampled",
                  "sample": winner["id"]}
        self._complete(record)
        self.log(f"start: {winner['id']} of {len(samples)} rewards sampled from scratch ({choice['summary']}): "
                 f"{_scores_line(record)}")
        return record

    def _iteration(self, it: int, best: dict) -> dict:
        key = f"i{it}"
        if self.ledger.has("decided", key):
            return self._after_decision(key, best)
        proposal = self._propose(it, best)
        challengers = []
        jobs = []
        for cid, c in zip(proposal["ids"], proposal["candidates"]):
            record = {"id": cid, "iteration": it, "parent": best["id"], "spec": c.get("spec"),
                      "origin": self.settings.synthesizer}
            if not c.get("ok") or c.get("spec") is None:
                record["failed"] = f"the synthesizer's answer was rejected: {c.get('rejection') or 'no spec'}"
            else:
                record["diff"] = deps.term_diff(best["spec"], c["spec"])
                check = self.ledger.once("validated", cid, lambda c=c: self._validate(c["spec"], best["spec"]))
                if not check["ok"]:
                    record["failed"] = f"the sandbox refused it: {check['error']}"
                else:
                    warm = best["outcome"]["run_dir"] if self.cfg.warm_start else None
                    jobs.append(self._job(cid, c["spec"], self.cfg.candidate_iterations, warm_start=warm))
            challengers.append(record)
        if proposal.get("error"):
            self.log(f"iteration {it}: {proposal['error']}")
        self._train_all(jobs, best)
        for record in challengers:
            if not record.get("failed"):
                self._complete(record, best)
        self.ledger.once("decided", key, lambda: decide(
            best, challengers, gates=self.cfg.gates, ranking=self.cfg.ranking, use_critic=self.use_critic,
            judge=lambda c: self._judge(c, best), style_measures=self.task.style_measures)
            | ({"note": proposal["error"]} if proposal.get("error") else {}))
        for record in challengers:
            self.records[record["id"]] = record
        return self._after_decision(key, best)

    def _after_decision(self, key: str, best: dict) -> dict:
        decision = self.ledger.get("decided", key)
        for cid, verdict in decision["verdicts"].items():
            self.log(f"  {cid}: {verdict['outcome']} - {verdict['reason']}")
        self.log(f"iteration {key[1:]}: {decision['summary']}" + (f" ({decision['note']})" if decision.get("note") else ""))
        if decision["winner"] is None:
            return best
        winner = self.records.get(decision["winner"]) or self._rebuild(decision["winner"], best)
        return winner

    def _rebuild(self, cid: str, parent: dict) -> dict:
        """A candidate's record from the ledger (a resumed run's earlier iteration)."""
        it = int(cid[1:].split("k")[0])
        proposal = self.ledger.get("synthesis", f"i{it}")
        spec = proposal["candidates"][proposal["ids"].index(cid)]["spec"]
        record = {"id": cid, "iteration": it, "parent": parent["id"], "spec": spec,
                  "diff": deps.term_diff(parent["spec"], spec), "origin": self.settings.synthesizer}
        self._complete(record, parent)
        return record

    def _final(self, best: dict) -> dict:
        if self.cfg.final_iterations == 0:
            return best
        record = {"id": FINAL, "iteration": self.cfg.iterations + 1, "parent": best["id"], "spec": best["spec"],
                  "diff": [], "origin": "final"}
        self._train_all([self._job(FINAL, best["spec"], self.cfg.final_iterations, warm_start=best["outcome"]["run_dir"],
                                   final=True)], best)
        self._complete(record, best)
        self.records[FINAL] = record
        return record

    # ------------------------------------------------------------------ steps
    def _request_gates(self) -> dict | None:
        """The gates the synthesizer should hold a parent to, where this run's differ from the defaults (a default
        run's requests stay as they were recorded: replay finds them by their content)."""
        defaults, own = GateConfig(), self.cfg.gates
        gates = {name: getattr(own, name) for name in REQUEST_GATES if getattr(own, name) != getattr(defaults, name)}
        return gates or None

    def _propose(self, it: int, best: dict) -> dict:
        """The iteration's synthesis record (motionvl.synth.synthesis_record + the candidates' ids), asked once."""
        key = f"i{it}"
        if self.ledger.has("synthesis", key):
            return self.ledger.get("synthesis", key)
        if best is None:  # the start of a task no reference fits: K independent samples from scratch
            request = SynthesisRequest(task=self.settings.task, iteration=0, num_candidates=self.cfg.candidates,
                                       seed=self.cfg.seed * 1000, temperature=self.cfg.temperature, from_scratch=True,
                                       environment=self._environment_dict())
        else:
            request = SynthesisRequest(
                task=self.settings.task, iteration=it - 1, num_candidates=self.cfg.candidates,
                parent=RewardSpec.from_dict(best["spec"]), parent_statistics=(best.get("outcome") or {}).get("term_stats"),
                parent_scores=_evaluation_summary(best), feedback=best.get("feedback") if self.use_critic else None,
                tried=self._tried(it), seed=self.cfg.seed * 1000 + it, temperature=self.cfg.temperature,
                environment=self._environment_dict(), gates=self._request_gates())
        self._state("proposing", iteration=it, best=(best or {}).get("id"))
        t0 = time.monotonic()
        capped = self._cap_reached()
        if capped:
            record = deps.synthesis_record(request, [], self.synthesizer, capped)
        elif hasattr(self.synthesizer, "propose_record"):
            try:
                record = self.synthesizer.propose_record(request)
            except SearchError:  # the graph cannot serve this run (a synthesizer node on another backend)
                raise
            except Exception as exc:  # noqa: BLE001 - a failed call ends this iteration, not the run
                record = deps.synthesis_record(request, [], None, f"the synthesizer failed: {type(exc).__name__}: {exc}")
        else:
            candidates, error = [], None
            try:
                candidates = list(self.synthesizer.propose(request))
            except Exception as exc:  # noqa: BLE001 - a failed call (cap, endpoint) ends this iteration, not the run
                error = f"the synthesizer failed: {type(exc).__name__}: {exc}"
            record = deps.synthesis_record(request, candidates, self.synthesizer, error)
        n = len(record.get("candidates") or [])
        if not n and not record.get("error"):
            record["error"] = "the synthesizer proposed nothing"
        record.update(ids=[f"i{it}k{k}" for k in range(1, n + 1)], wall_s=time.monotonic() - t0)
        return self.ledger.append("synthesis", key, {k: v for k, v in record.items() if k != "kind"})

    def _tried(self, it: int) -> list[dict]:
        """The candidates of iterations before `it` that did not win, from the ledger (so a resumed run sees them):
        the synthesizer proposes none of them again and reads why they lost or failed (the check's or training's
        cause), with their training statistics; and the answers refused at synthesis, with why."""
        out, parent = [], START
        for key, proposal in self.ledger.items("synthesis"):
            decision = self.ledger.get("decided", key) or (self.ledger.get("chosen", START) if key == "i0" else None)
            if int(key[1:]) >= it or decision is None:
                continue
            for cid, c in zip(proposal.get("ids") or [], proposal.get("candidates") or []):
                verdict = decision["verdicts"].get(cid) or {}
                if c.get("spec") is None:
                    if not str(c.get("rejection") or "").startswith(("cap reached", "not attempted")):
                        out.append({"id": cid, "parent": parent, "outcome": "refused", "reason": c.get("rejection")})
                    continue
                if verdict.get("outcome") == "won":
                    continue
                trained = self.ledger.get("trained", cid) or {}
                outcome = trained.get("outcome") or {}
                out.append({"id": cid, "parent": parent, "edits": c.get("edits") or [],
                            "terms": c["spec"].get("terms"), "code": c["spec"].get("code"),
                            "scale": c["spec"].get("scale", 1.0), "only_positive": c["spec"].get("only_positive", False),
                            "outcome": verdict.get("outcome"), "reason": verdict.get("reason"),
                            "scores": _evaluation_summary({"evaluation": outcome.get("evaluation")}),
                            "statistics": _statistics_summary(outcome.get("term_stats"))})
            parent = START if key == "i0" else decision.get("winner") or parent
        return out

    def _environment_config(self):
        """The run's training environment (the training config with the run's overrides, its num_envs): candidates
        are checked on it, as the trainers will run them."""
        if self._environment is None:
            from motionvl.rl.config import TrainConfig

            self._environment = TrainConfig.from_yaml(self.settings.train_config, overrides=self.train_overrides).env
        return self._environment

    def _environment_dict(self) -> dict:
        from motionvl.rl.config import _plain

        return _plain(dataclasses.asdict(self._environment_config()))

    def _validate(self, spec: dict, parent: dict | None) -> dict:
        """The sandbox's check of a candidate on the run's environment, after the fields it may not change (r*'s
        scale and only_positive; a sample from scratch: scale 1 and only_positive false, the reference's)."""
        t0 = time.monotonic()
        problem = fixed_field_problem(parent, spec)
        if problem is None:
            try:
                validate_spec(spec, robot=self.robot, env_cfg=self._environment_config())
            except ValueError as exc:
                problem = str(exc)
        return {"ok": problem is None, "error": problem, "wall_s": time.monotonic() - t0,
                "num_envs": self._environment_config().num_envs}

    def _critic_cap_reached(self) -> str | None:
        """The run's caps on the critic's model use, counted over the ledger (a resumed run keeps them)."""
        if self.critic is None or getattr(self.critic, "name", "") == "kinematic" or getattr(
                self.critic, "offline", False):
            return None
        used, limits = cap_measures(critic_usage(self.ledger)), self.cfg.limits
        caps = {"calls": limits.max_critic_calls, "tokens": limits.max_critic_tokens,
                "images": limits.max_critic_images, "bytes": limits.max_critic_bytes}
        for name, cap in caps.items():
            if used[name] >= cap:
                return f"cap reached: the critic used {used[name]} of its {cap} {name}; no more model calls"
        return None

    def _cap_reached(self) -> str | None:
        """The run's cap on synthesizer calls, tokens and bytes, counted over the ledger (so a resumed run keeps it)."""
        used = usage_totals([data for _, data in self.ledger.items("synthesis")])
        limits = self.cfg.limits
        if used["calls"] >= limits.max_synth_calls:
            return f"cap reached: the synthesizer made {used['calls']} of its {limits.max_synth_calls} calls; no more proposals"
        if used["tokens"] >= limits.max_synth_tokens:
            return f"cap reached: the synthesizer used {used['tokens']} of its {limits.max_synth_tokens} tokens; no more proposals"
        if used["bytes"] >= limits.max_synth_bytes:
            return f"cap reached: the synthesizer used {used['bytes']} of its {limits.max_synth_bytes} bytes; no more proposals"
        return None

    def _job(self, cid: str, spec: dict, iterations: int, *, warm_start: str | None, final: bool = False) -> TrainingJob:
        overrides = list(self.train_overrides)
        if not final and not self.cfg.candidate_selection:
            overrides += ["selection.minutes=0", "selection.iterations=0"]
        ev, task = self.cfg.evaluation, self.task
        return TrainingJob(candidate_id=cid, spec=RewardSpec.from_dict(spec, where=f"candidate {cid}"),
                           iterations=iterations, warm_start=warm_start, overrides=tuple(overrides),
                           run_dir=str(self.candidate_dir(cid)),
                           evaluation={"episodes": ev.episodes, "seconds": ev.seconds, "command": list(task.command),
                                       "randomize": True, "seed": ev.seed, "robot_dt": not ev.training_physics,
                                       "success_fraction": ev.success_fraction, "criterion": task.criterion.to_dict(),
                                       "terrain": task.terrain, "terrain_level": task.terrain_level})

    def candidate_dir(self, cid: str) -> Path:
        return self.run_dir / "candidates" / cid

    def _train_all(self, jobs: list[TrainingJob], best: dict | None = None) -> None:
        todo = []
        for job in jobs:
            if self.ledger.has("trained", job.candidate_id):
                continue
            finished = _read_outcome(Path(job.run_dir), job.candidate_id)
            if finished is not None:  # trained before a kill, the record not yet written
                self.ledger.append("trained", job.candidate_id, {"ok": True, "outcome": finished, "trainer": "recovered",
                                                                "wall_s": 0.0, "reason": None})
            else:
                todo.append(job)
        if not todo:
            return
        limits = self.cfg.limits
        dispatcher = Dispatcher(self.slots, limit_s=lambda job: limits.candidate_limit_s(job.iterations or 0),
                                heartbeat_s=limits.heartbeat_s, max_redispatch=limits.max_redispatch,
                                on_progress=self._show_progress, log=self.log, no_trainer_s=self.no_trainer_s,
                                should_stop=self._stop.is_set)
        self._state("training", candidates=[job.candidate_id for job in todo])
        self._totals = {job.candidate_id: job.iterations for job in todo}
        for result in dispatcher.run(todo):
            if result.reason == STOPPED:
                self._check_stop()
            self._close_bar(result.job.candidate_id)
            data = {"ok": result.ok, "outcome": result.outcome, "reason": result.reason, "trainer": result.trainer,
                    "wall_s": result.wall_s}
            self.ledger.append("trained", result.job.candidate_id, data)
            self.log(f"{result.job.candidate_id}: " + ("trained" if result.ok else f"failed: {result.reason}"))
            if self.cfg.playback.while_training and result.ok:
                self._play(result.job.candidate_id, result.outcome, best)

    def _complete(self, record: dict, best: dict | None = None) -> None:
        """Fill a trained candidate's record: outcome, evaluation, playback, critique (each once)."""
        trained = self.ledger.get("trained", record["id"])
        if trained is None or not trained["ok"]:
            record["failed"] = f"training failed: {trained['reason'] if trained else 'not trained'}"
            return
        record["outcome"] = trained["outcome"]
        record["evaluation"] = trained["outcome"].get("evaluation") or {}
        record["playback"] = self._play(record["id"], trained["outcome"], best)
        if self.use_critic:
            record["feedback"] = self.ledger.once("critiqued", record["id"], lambda: self._critique(record, best))
        self.records[record["id"]] = record

    def _play(self, cid: str, outcome: dict, best: dict | None = None) -> dict:
        """The candidate's playback (once); a playback that judges (the graph's vlm_critic) is asked to critique it
        against r*'s feedback as well."""
        self._check_stop()

        def play() -> dict:
            t0 = time.monotonic()
            out = self.candidate_dir(cid) / "playback"
            self.log(f"{cid}: playing back ({self.playback.name})")
            self._state("playing back", candidate=cid)
            pb = self.cfg.playback
            images = self.critic is not None and getattr(self.critic, "name", "") != "kinematic"
            render = images or (pb.render and (pb.render_candidates or cid in (START, FINAL)))
            critique = None
            if self.use_critic and getattr(self.playback, "judges", False) and not self._critic_cap_reached():
                critique = CritiqueRequest(self.settings.task, (best or {}).get("feedback"))
            try:
                result = self.playback.play(cid, outcome["policy_path"], out, render=render, critique=critique,
                                            **self._playback_task()).summary()
            except Exception as exc:  # noqa: BLE001 - a failed playback fails this candidate's gates, not the search
                result = {"candidate_id": cid, "out_dir": str(out), "fault": f"playback failed: {type(exc).__name__}: "
                          f"{exc}", "clipped_share": 0.0, "duration_s": 0.0, "frame_times": [], "meta": {"error": True}}
            return {**result, "wall_s": time.monotonic() - t0}
        return self.ledger.once("played", cid, play)

    def _playback_task(self) -> dict:
        """What every playback is played at: the task's command on its terrain."""
        return {"command": self.task.command, "terrain": self.task.terrain, "terrain_level": self.task.terrain_level}

    def _critique(self, record: dict, best: dict | None) -> dict:
        """The critic's feedback on a candidate's playback, its claims cross-checked with the rollout's kinematics
        (motionvl.critic.crosscheck) whichever path judged it."""
        from motionvl.critic.crosscheck import cross_check_dict
        from motionvl.critic.schema import MotionFeedback

        pb = PlaybackResult.from_summary(record["playback"])
        trajectory = pb.trajectory() if pb.trajectory_path.exists() else None
        if record["playback"].get("feedback") is not None:  # judged on the playback's path as it was played
            return cross_check_dict(record["playback"]["feedback"], trajectory)
        t0 = time.monotonic()
        name = getattr(self.critic, "name", "critic")
        if trajectory is None:
            return MotionFeedback.invalid(name, self.settings.task,
                                          f"nothing to judge: the playback recorded no rollout ({pb.fault})").to_dict()
        capped = self._critic_cap_reached()
        if capped:
            return MotionFeedback.invalid(name, self.settings.task, capped).to_dict()
        previous = (best or {}).get("feedback")
        fb = self.critic.critique(pb.frames(), pb.frame_times, self.settings.task,
                                  previous_best=json.dumps(previous) if previous else None, trajectory=trajectory)
        data = cross_check_dict(fb.to_dict(), trajectory)
        data["meta"] = {**data.get("meta", {}), "wall_s": time.monotonic() - t0}
        return data

    def _judge(self, challenger: dict, best: dict) -> dict:
        def ask() -> dict:
            t0 = time.monotonic()
            ch, bs = (PlaybackResult.from_summary(r["playback"]) for r in (challenger, best))
            capped = self._critic_cap_reached()
            if capped or not (ch.trajectory_path.exists() and bs.trajectory_path.exists()):
                missing = {"preferred": None, "confidence": 0.0, "valid": False,
                           "reason": capped or "a playback recorded no rollout: nothing to compare"}
                return {"challenger_first": missing, "best_first": missing, "against": best["id"], "wall_s": 0.0}
            rollouts = {name: Rollout(pb.frames(), pb.frame_times, pb.trajectory()) for name, pb in
                        (("challenger", ch), ("best", bs))}
            task = self.settings.task
            return {"challenger_first": deps.compare(self.critic, rollouts["challenger"], rollouts["best"], task),
                    "best_first": deps.compare(self.critic, rollouts["best"], rollouts["challenger"], task),
                    "against": best["id"], "wall_s": time.monotonic() - t0}
        return self.ledger.once("compared", f"{challenger['id']}-vs-{best['id']}", ask)

    def _adopt_start_run(self, run: Path) -> dict:
        """A given training run of the reference reward as the start: evaluated here like any candidate."""
        from motionvl.rl.evaluate import evaluate

        policy = run / "policy.onnx"
        if not policy.exists() or not (run / "checkpoints" / "latest.pt").exists():
            raise SearchError(f"--start-run {run}: needs a training run directory with policy.onnx and checkpoints/")
        ev = self.cfg.evaluation
        t0 = time.monotonic()
        evaluation = evaluate(policy, episodes=ev.episodes, seconds=ev.seconds, command=self.task.command,
                              randomize=True, seed=ev.seed, robot_dt=not ev.training_physics,
                              criterion=self.task.criterion, terrain=self.task.terrain,
                              terrain_level=self.task.terrain_level, robot=self.robot)
        stats = json.loads((run / "term_stats.json").read_text()) if (run / "term_stats.json").exists() else {}
        return {"ok": True, "trainer": "given", "reason": None, "wall_s": time.monotonic() - t0,
                "outcome": {"candidate_id": START, "policy_path": str(policy), "run_dir": str(run),
                            "iterations": stats.get("iterations"), "start_iteration": 0, "term_stats": stats,
                            "evaluation": evaluation, "train_wall_s": 0.0, "eval_wall_s": time.monotonic() - t0}}

    # ------------------------------------------------------------------ export and report
    def _export(self, final: dict, best: dict) -> dict:
        chosen, why = final, "the winner's longer training"
        held_back = failures_against(final, best, self.cfg.gates) if final is not best else []
        if held_back:
            chosen = best
            why = f"the longer training failed the gates ({'; '.join(held_back)}): r* itself ({best['id']}) is exported"
        elif final is not best and gate_failures(final, best, self.cfg.gates):
            why += f" (it fails only gates r* fails too, no worse than r*: {'; '.join(gate_failures(final, best, self.cfg.gates))})"
        digest = reward_key(chosen["spec"])
        meta = {"motionvl_run": self.run_dir.resolve().name, "reward_spec_hash": digest,
                "code_version": code_version(), "task": self._task_metadata(chosen), "search_label": self.settings.label,
                "candidate": chosen["id"]}
        target = self.run_dir / "policy.onnx"
        write_policy(chosen["outcome"]["policy_path"], target, meta)
        RewardSpec.from_dict(chosen["spec"]).save(self.run_dir / "reward_spec.yaml")
        self.log(f"exported {target} ({chosen['id']}, {why}; reward spec {digest})")
        return {"policy": str(target), "candidate": chosen["id"], "reason": why, "reward_spec_hash": digest,
                "metadata": meta}

    def _task_metadata(self, chosen: dict) -> dict:
        """The task the exported policy was trained for, with the command ranges it trained on (its contract's)."""
        from motionvl.rl.export import load_policy

        ranges = load_policy(chosen["outcome"]["policy_path"]).metadata.get("command_ranges")
        return {**self.task.to_dict(), "command_ranges": ranges}

    def _film(self, record: dict) -> None:
        """The exported policy's playback rendered for the report, where its playback was not (an r* exported
        because the longer training failed the gates)."""
        if not self.cfg.playback.render or (record.get("playback") or {}).get("video"):
            return

        def film() -> dict:
            t0 = time.monotonic()
            out = self.candidate_dir(record["id"]) / "playback_filmed"
            return {**self.playback.play(record["id"], record["outcome"]["policy_path"], out, render=True,
                                         **self._playback_task()).summary(), "wall_s": time.monotonic() - t0}
        try:
            self.ledger.once("filmed", record["id"], film)
        except Exception as exc:  # noqa: BLE001 - the report goes without the film
            self.log(f"warning: could not film {record['id']}'s playback: {type(exc).__name__}: {exc}")

    def _table_rows(self, start: dict, chosen: dict) -> None:
        """Per-term episode rewards of the start and the exported policy (the paper's Table I rows)."""
        from motionvl.search.table import episode_term_rewards, table_spec

        spec = table_spec([start["spec"], chosen["spec"]])
        rows = [(start, "RL-Base (start)")] + ([(chosen, self.settings.label)] if chosen is not start else [])
        for record, label in rows:
            def measure(record=record, label=label) -> dict:
                t0 = time.monotonic()
                terms = episode_term_rewards(record["outcome"]["policy_path"], spec, self.cfg.evaluation,
                                             robot=self.robot, command=self.task.command, terrain=self.task.terrain,
                                             terrain_level=self.task.terrain_level)
                return {"label": label, "terms": terms, "command": list(self.task.command), "terrain": self.task.terrain,
                        "terrain_level": self.task.terrain_level, "wall_s": time.monotonic() - t0}
            self.ledger.once("table", record["id"], measure)

    def _write_report(self) -> None:
        try:
            from motionvl.search.report import write_report

            paths = write_report(self.run_dir)
            self.log(f"report: {paths['html']}")
        except Exception as exc:  # noqa: BLE001 - the policy is exported; a report can be rewritten
            self.log(f"warning: the report could not be written ({type(exc).__name__}: {exc}); "
                     f"rerun `motionvl train --report {self.run_dir}`")

    # ------------------------------------------------------------------ progress
    def _state(self, phase: str, **info) -> None:
        self.on_state({"phase": phase, "run_dir": str(self.run_dir), "task": self.settings.task,
                       "label": self.settings.label, **info})

    def _show_progress(self, cid: str, state: SlotState) -> None:
        self.on_state({"phase": "training", "candidate": cid, "iteration": state.iteration,
                       "trainer_phase": state.phase})
        if not self.progress or state.iteration is None:
            return
        from tqdm import tqdm

        bar = self._bars.get(cid)
        if bar is None:
            bar = self._bars[cid] = tqdm(desc=cid, unit="it", dynamic_ncols=True, leave=False,
                                         total=getattr(self, "_totals", {}).get(cid))
            bar.start = state.iteration
        bar.n = state.iteration - bar.start
        bar.set_postfix_str(state.phase or "", refresh=False)
        bar.refresh()

    def _close_bar(self, cid: str) -> None:
        bar = self._bars.pop(cid, None)
        if bar is not None:
            bar.close()


# ----------------------------------------------------------------------------- helpers
def write_policy(source: str | Path, target: Path, extra_metadata: dict) -> Path:
    """Copy an exported ONNX policy to `target` with `extra_metadata` added to its metadata props."""
    import onnx

    model = onnx.load(str(source))
    props = {p.key: p.value for p in model.metadata_props}
    props.update({k: json.dumps(v) for k, v in extra_metadata.items()})
    onnx.helper.set_model_props(model, props)
    tmp = target.with_suffix(".tmp.onnx")
    onnx.save(model, str(tmp))
    tmp.replace(target)
    return target


def _read_outcome(run_dir: Path, cid: str) -> dict | None:
    try:
        outcome = json.loads((run_dir / OUTCOME_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return outcome if outcome.get("candidate_id") == cid and outcome.get("complete", True) else None


def _statistics_summary(stats: dict | None) -> dict:
    """A tried candidate's training statistics for the next prompt: per term its mean and last, the iterations."""
    if not stats:
        return {}
    terms = {name: {k: t[k] for k in ("mean", "last") if isinstance(t.get(k), (int, float))}
             for name, t in (stats.get("terms") or {}).items() if isinstance(t, dict)}
    return {"iterations": stats.get("iterations"), "terms": terms}


def _evaluation_summary(record: dict) -> dict:
    ev = record.get("evaluation") or {}
    return {k: ev.get(k) for k in EVALUATION_SUMMARY_KEYS if k in ev}


def _scores_line(record: dict) -> str:
    ev = record.get("evaluation") or {}
    fb = record.get("feedback") or {}
    parts = [f"success {ev.get('success_rate')}", f"falls {ev.get('fell_fraction')}", f"task score {ev.get('task_score')}",
             f"stance knee {ev.get('knee_angle_stance_deg')} deg"]
    if fb:
        parts.append(f"alignment {fb.get('alignment_score')}")
    return ", ".join(parts)


class _lock:
    """An exclusive lock on RUN_DIR/.lock for this process's lifetime (released when it dies, even by kill -9)."""

    def __init__(self, run_dir: Path):
        self._file = (run_dir / ".lock").open("a")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            raise SearchError(f"{run_dir} is in use by another search process") from None

    def close(self) -> None:
        if not self._file.closed:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()

