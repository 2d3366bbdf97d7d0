"""The search's settings: one dataclass (budget, gates, ranking, evaluation, playback, limits), presets.

Presets live in config/search.yaml (`presets:` one mapping per name, each overriding fields of
`SearchConfig`), read by `motionvl train`, the orchestrator node and train.launch.py alike.
Budgets are PPO iterations, never minutes: a slower machine takes longer rather than training less.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from motionvl.backend_names import MODEL_CRITICS, MODEL_SYNTHESIZERS, ModelSettings
from motionvl.envs.config import dataclass_from_dict
from motionvl.rl.config import _plain
from motionvl.robot import ConfigError, package_root

SEARCH_CONFIG = "config/search.yaml"

MODES = ("reference", "synth", "synth+critic")
"""The paper's ablation: `reference` trains the reference reward alone (RL-Base); `synth` lets the
synthesizer revise the reward from training statistics and task scores without critic feedback
(RL-LLM); `synth+critic` adds the critic's feedback, alignment score and pairwise judgement (RL-LLM+VLM)."""

def mode_label(mode: str, synthesizer: str | None, critic: str | None) -> str:
    """The name a run's results go under, from the backends that actually ran: an offline synthesizer is
    never called an LLM, an offline critic never a VLM (RL-Rules+Kinematic, not RL-LLM+VLM)."""
    if mode == "reference":
        return "RL-Base"
    synthesizer = (synthesizer or "").split(":")[0] or None
    synth = "LLM" if synthesizer in MODEL_SYNTHESIZERS else (synthesizer or "none").capitalize()
    if mode == "synth":
        return f"RL-{synth}"
    critic = (critic or "").split(":")[0] or None  # a critic names itself backend:model ("openai:qwen2-vl")
    judge = "VLM" if critic in MODEL_CRITICS else (critic or "none").capitalize()
    return f"RL-{synth}+{judge}"


@dataclasses.dataclass
class GateConfig:
    """Hard gates a candidate must pass before it is ranked. Set by the operator; no synthesizer edits them."""

    min_success_rate: float = 0.85
    """Least share of held-out randomised episodes that walk (EvaluationConfig.success_fraction) without a fall."""
    max_fall_fraction: float = 0.15
    """Largest share of held-out episodes that fall."""
    max_success_drop: float = 0.05
    """A challenger may walk successfully at most this much less often than the best so far (r*), so a
    style change never buys itself with the walk (notes/straight-knee-probe.md)."""
    max_clipped_share: float = 0.05
    """Largest share of (control step, joint) commands the playback's deployment controller clipped: targets beyond
    what the policy was trained to send (training clips at the robot's target limits too) and torques at the
    effort limits (torque path)."""
    require_no_fault: bool = True
    """The playback must end without a fault (fall, NaN, limit violation, stale state); a fall alone counts with
    the falls gate against an r* that fails it (motionvl.search.decision)."""


@dataclasses.dataclass
class RankingConfig:
    """Ranking of the candidates that passed the gates: score = task_weight x task score + alignment_weight x
    critic alignment (both in [0, 1]); without critic feedback (mode `synth`) the task score alone."""

    task_weight: float = 0.5
    """Weight of the reward-free task score (mean over held-out episodes of min(1, distance / commanded
    distance) x time upright share)."""
    alignment_weight: float = 0.5
    """Weight of the critic's alignment score of the playback with the task sentence."""
    margin: float = 0.02
    """A challenger beats r* by more than this: a win unless the critic's self-consistent pairwise judgement
    prefers r* (veto). Within +-margin: a tie, won only when the judgement prefers the challenger (tiebreak).
    Challengers within it of the best-ranked one tie too: the critic's alignment orders them."""
    pairwise: bool = True
    """Ask the critic's pairwise comparison (both orders; only a self-consistent answer counts)."""
    style_tiebreak: float = 0.05
    """A tie the critic's comparison leaves open (no self-consistent preference, or no critic) goes to the challenger
    when the held-out evaluation shows it better by at least this share on every style measure the sentence names
    (motionvl.task.STYLE_MEASURES: 64 episodes say more than one playback) and it succeeds and falls no worse than
    r*. 0: off. 5 %: four times the spread of those means over evaluation seeds (one policy, three seeds of 64
    randomised episodes with pushes: stance knee 1.2 %, swing clearance 0.7 %)."""


@dataclasses.dataclass
class EvaluationConfig:
    """The reward-free evaluation of every trained candidate on held-out randomised episodes."""

    episodes: int = 64
    """Randomised episodes per candidate (every candidate sees the same ones)."""
    seconds: float = 10.0
    """Length of each episode (at the task's command, on its terrain, judged by its criterion: motionvl.task)."""
    success_fraction: float = 5.0 / 6.0
    """A walking episode succeeds when it covers this share of the commanded distance without a fall: 5 m of the
    6 m of 10 s at 0.6 m/s, the project's walking criterion (a turn in place: this share of the commanded heading).
    A policy that tracks the command exactly spreads around 6 m over randomised episodes, so asking 90 % (the
    trainer's checkpoint selection) would gate out candidates for tracking better than an overshooting r*."""
    seed: int = 9000
    """Episodes' seed, apart from the training seeds and the trainer's own selection (7000)."""
    training_physics: bool = True
    """Evaluate at the training physics (faster; the trainer's selection does the same), else at the robot's rate."""


@dataclasses.dataclass
class PlaybackConfig:
    """The rollout the critic judges, played through the deployment path."""

    seconds: float = 10.0
    """Length of the playback (at the task's command, on its terrain)."""
    frame_interval_s: float = 0.1
    """Seconds between the frames rendered and the frames a VLM critic sees (the paper: 0.1 s)."""
    camera: str = "side"
    """Model camera the playback is filmed with: "side" follows the robot from its right at knee-to-hip height,
    square to the walking direction, so a VLM sees knee and ankle angles in profile and both feet."""
    width: int = 448
    """Frame width in pixels. A VLM reads images in patches of 14-32 px and many resize to about 448-512 px: at
    448 x 336 the robot's leg spans ~200 px, enough to tell 10 degrees of knee bend from 30, in ~30 kB of JPEG."""
    height: int = 336
    """Frame height in pixels (4:3)."""
    render: bool = True
    """Render the start's and the final policy's playbacks (video and contact sheet for the report); off: none."""
    render_candidates: bool = False
    """Also render every candidate's playback. A critic that judges images (a VLM) always gets frames; the
    kinematic critic reads the trajectory, so rendering its candidates only costs time (~2-4 s each)."""
    while_training: bool = False
    """Play back while other candidates train. Off by default: where trainers use every core a starved
    playback would score stale-state faults as falls."""


@dataclasses.dataclass
class LimitConfig:
    """Wall-clock limits and caps: a stalled or runaway part fails with a reason instead of hanging the search."""

    startup_s: float = 300.0
    """Time a candidate may take before its first PPO iteration (process start, env build, warm start)."""
    seconds_per_iteration: float = 30.0
    """Wall-clock allowance per PPO iteration (a full-speed CPU machine takes ~1.1 s at 512 envs):
    a candidate's limit is startup_s + this x iterations + evaluation_s."""
    evaluation_s: float = 600.0
    """Allowance for the reward-free evaluation after training."""
    heartbeat_s: float = 300.0
    """A candidate whose trainer reports no progress (iteration or phase) for this long has stalled."""
    trainer_lost_s: float = 60.0
    """A trainer node silent for this long has disappeared: its candidate goes to another trainer (the goal it
    had is cancelled, so a trainer that was only starved resumes the candidate from its last iteration). 60: a
    trainer's 1 s heartbeat went silent for 15 s on a 2-core machine running two trainings and a compiler."""
    max_redispatch: int = 2
    """How often one candidate may be handed to another trainer after its trainer disappeared."""
    max_synth_calls: int = 200
    """Model calls of the synthesizer over the run; reaching it ends proposing (the search finishes with r*)."""
    max_synth_tokens: int = 2_000_000
    """Prompt + completion tokens of the synthesizer over the run; reaching it ends proposing the same way."""
    max_synth_bytes: int = 64_000_000
    """Bytes sent to and received from the synthesizer's endpoint over the run (a prompt is ~32 kB: 200 calls
    with their answers take ~8 MB); reaching it ends proposing the same way."""
    max_critic_calls: int = 400
    """Model calls of the critic (critiques, both orders of each comparison, re-asks) over the run. The gpu
    preset (K=10, N=5) makes ~150 with every answer re-asked once ~300; reaching it, the critic answers
    "cap reached" (invalid feedback: alignment counts 0, no pairwise judgement) and the search goes on."""
    max_critic_tokens: int = 8_000_000
    """Prompt + completion tokens of the critic over the run (16 frames of 448 x 336 are ~3-12k tokens)."""
    max_critic_images: int = 10_000
    """Images sent to the critic over the run: 16 per critique, 32 per comparison order."""
    max_critic_bytes: int = 400_000_000
    """Bytes sent to and received from the critic's endpoint over the run (~30 kB per JPEG frame)."""
    model_connect_timeout_s: float = ModelSettings.connect_timeout_s
    """Seconds a model endpoint (synthesizer, critic) may take to accept a connection (`--connect-timeout`)."""
    model_read_timeout_s: float = ModelSettings.read_timeout_s
    """Seconds a model endpoint may take to answer one request, from sending it to the answer's last byte
    (`--read-timeout`); a request waiting longer than 10 s logs a line every 10 s."""

    def candidate_limit_s(self, iterations: int) -> float:
        return self.startup_s + self.seconds_per_iteration * iterations + self.evaluation_s


@dataclasses.dataclass
class SearchConfig:
    """Everything a search run needs apart from the task sentence and its backends."""

    candidates: int = 3
    """K: reward candidates proposed per iteration."""
    iterations: int = 2
    """N: search iterations after the start (the reference reward and its policy)."""
    base_iterations: int = 300
    """PPO iterations of the start policy on the reference reward (skipped with a given start run)."""
    candidate_iterations: int = 60
    """PPO iterations per candidate (on top of r*'s when warm-started)."""
    final_iterations: int = 150
    """PPO iterations of the winner's longer training at the end (warm-started from its candidate run)."""
    warm_start: bool = True
    """Candidates start from r*'s policy (weights, normaliser, schedules' iteration); false: from scratch
    (candidate_iterations from iteration 0). The CPU presets warm-start."""
    num_envs: int | None = None
    """Parallel training environments (None: the training config's)."""
    seed: int = 0
    """Seed of the synthesizer's sampling and of every training run."""
    command: tuple | None = None
    """Velocity command (vx m/s, vy m/s, yaw rate rad/s) of the task, replacing the one the sentence gives
    (`motionvl train --command`); needed for a sentence the rules do not understand (model synthesizers only).
    None: the sentence's (motionvl.task's table of defaults)."""
    task_share: float = 0.5
    """Share of the trainers' sampled commands drawn around the task's command (the rest over the training
    config's ranges) when the base's ranges do not train it on their own: turning or standing in place, a
    command beyond the ranges (motionvl.task.Task.training_overrides; a walk inside them draws none)."""
    temperature: float = 0.3
    """Synthesizer sampling temperature (the paper: 0.3)."""
    training_overrides: tuple = ()
    """Extra "dotted.key=value" overrides of the training config for every run (e.g. tiny test budgets)."""
    candidate_selection: bool = False
    """Let the trainer's own held-out selection choose each candidate's exported iterate (costs validations
    in every candidate; the start and final runs always use the training config's selection)."""
    gates: GateConfig = dataclasses.field(default_factory=GateConfig)
    """Hard gates (gates section)."""
    ranking: RankingConfig = dataclasses.field(default_factory=RankingConfig)
    """Ranking and the pairwise judge (ranking section)."""
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    """Held-out reward-free evaluation (evaluation section)."""
    playback: PlaybackConfig = dataclasses.field(default_factory=PlaybackConfig)
    """The critic's playback (playback section)."""
    limits: LimitConfig = dataclasses.field(default_factory=LimitConfig)
    """Wall-clock limits and caps (limits section)."""

    @property
    def total_iterations(self) -> int:
        """PPO iterations the search trains at most, summed over every run (what the reference alone gets
        at equal budget)."""
        return self.base_iterations + self.iterations * self.candidates * self.candidate_iterations + self.final_iterations

    def validate(self) -> "SearchConfig":
        checks = [
            (self.candidates >= 1, "candidates (K) must be >= 1"),
            (self.iterations >= 0, "iterations (N) must be >= 0"),
            (self.base_iterations >= 1, "base_iterations must be >= 1"),
            (self.candidate_iterations >= 1, "candidate_iterations must be >= 1"),
            (self.final_iterations >= 0, "final_iterations must be >= 0"),
            (self.num_envs is None or self.num_envs >= 1, "num_envs must be >= 1"),
            (0.0 <= self.temperature <= 2.0, "temperature must be in [0, 2]"),
            (0.0 <= self.gates.min_success_rate <= 1.0, "gates.min_success_rate must be in [0, 1]"),
            (0.0 <= self.gates.max_fall_fraction <= 1.0, "gates.max_fall_fraction must be in [0, 1]"),
            (0.0 <= self.gates.max_clipped_share <= 1.0, "gates.max_clipped_share must be in [0, 1]"),
            (self.ranking.task_weight >= 0 and self.ranking.alignment_weight >= 0
             and self.ranking.task_weight + self.ranking.alignment_weight > 0,
             "ranking weights must be >= 0 and not both 0"),
            (self.ranking.margin >= 0 and 0.0 <= self.ranking.style_tiebreak < 1.0,
             "ranking.margin must be >= 0 and ranking.style_tiebreak in [0, 1) (0: off)"),
            (self.command is None or (len(self.command) == 3 and all(isinstance(c, (int, float)) and not
                                                                       isinstance(c, bool) for c in self.command)),
             "command must be [vx, vy, yaw_rate] or null"),
            (0.0 <= self.task_share <= 1.0, "task_share must be in [0, 1]"),
            (self.evaluation.episodes >= 1 and self.evaluation.seconds > 0, "evaluation needs episodes >= 1, seconds > 0"),
            (0.0 < self.evaluation.success_fraction <= 1.0, "evaluation.success_fraction must be in (0, 1]"),
            (self.playback.seconds > 0 and self.playback.frame_interval_s > 0, "playback seconds and frame interval must be > 0"),
            (self.limits.heartbeat_s > 0 and self.limits.trainer_lost_s > 0, "limits must be > 0"),
            (self.limits.model_connect_timeout_s > 0 and self.limits.model_read_timeout_s > 0,
             "limits.model_connect_timeout_s and model_read_timeout_s must be > 0"),
            (min(self.limits.max_synth_calls, self.limits.max_synth_tokens, self.limits.max_synth_bytes,
                 self.limits.max_critic_calls, self.limits.max_critic_tokens, self.limits.max_critic_images,
                 self.limits.max_critic_bytes) >= 0, "limits.max_* caps must be >= 0"),
            (self.playback.width >= 16 and self.playback.height >= 16, "playback width and height must be >= 16"),
        ]
        errors = [msg for ok, msg in checks if not ok]
        if errors:
            raise ConfigError("search config: " + "; ".join(errors))
        return self

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, raw: dict, where: str = "search config") -> "SearchConfig":
        raw = dict(raw or {})
        for key in ("training_overrides",):
            if key in raw and isinstance(raw[key], list):
                raw[key] = tuple(raw[key])
        cfg = dataclass_from_dict(cls, raw, where)
        if isinstance(cfg.command, list):
            cfg.command = tuple(cfg.command)
        return cfg.validate()


def presets(path: str | Path | None = None) -> dict[str, dict]:
    """{preset name: overrides of SearchConfig} from config/search.yaml."""
    path = Path(path) if path else package_root() / SEARCH_CONFIG
    if not path.exists():
        raise ConfigError(f"search presets not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    found = raw.get("presets")
    if not isinstance(found, dict) or not found:
        raise ConfigError(f"{path}: expected a 'presets' mapping of name -> settings")
    return found


def load_search_config(preset: str = "quick", overrides: dict | None = None,
                       path: str | Path | None = None) -> SearchConfig:
    """The preset's SearchConfig with `overrides` (a nested mapping, e.g. {"gates": {"min_success_rate": 0.9}})."""
    table = presets(path)
    if preset not in table:
        raise ConfigError(f"unknown preset {preset!r}; presets: {sorted(table)}")
    merged = _merge(dict(table[preset] or {}), dict(overrides or {}))
    return SearchConfig.from_dict(merged, where=f"search preset {preset!r}")


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out.get(key) or {}, value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out

