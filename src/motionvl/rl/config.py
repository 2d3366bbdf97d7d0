"""Training configuration: one nested dataclass (env + PPO + run), loadable from config/training.yaml.

`TrainConfig.to_rsl_rl()` turns it into the one nested dict that rsl_rl's `OnPolicyRunner` expects.
The helpers at the end build argparse options from a dataclass whose fields carry docstrings
(CleanRL style: the CLI arguments are a dataclass, the help text is the field's docstring).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from pathlib import Path

import yaml

from motionvl.dataclass_docs import field_docs
from motionvl.device import resolve_device
from motionvl.envs.config import EnvConfig, dataclass_from_dict, is_count, is_number
from motionvl.rewards.spec import DEFAULT_COST_LIMIT
from motionvl.robot import ConfigError, package_root
from motionvl.task import DEFAULT_COMMAND

DEFAULT_TRAINING_CONFIG = "config/training.yaml"


@dataclasses.dataclass
class PPOConfig:
    """rsl_rl PPO, actor/critic and rollout settings (tuned for CPU throughput, see training.yaml)."""

    num_steps_per_env: int = 24
    """Policy steps each environment collects per iteration (rollout length)."""
    num_learning_epochs: int = 5
    """Passes over the rollout per PPO update."""
    num_mini_batches: int = 4
    """Mini-batches per epoch (mini-batch size = num_envs * num_steps_per_env / num_mini_batches)."""
    learning_rate: float = 1.0e-3
    """Adam learning rate (initial value when schedule is 'adaptive')."""
    schedule: str = "adaptive"
    """'adaptive' (adjust the learning rate to keep the KL near desired_kl) or 'fixed'."""
    desired_kl: float = 0.02
    """Target KL divergence between consecutive policies for the adaptive schedule. With an action std
    as small as this policy's (~0.2) every update moves the KL a lot: at 0.01 the learning rate sat at
    5e-5 - 1e-4 for a whole run, at 0.02 near 6e-4 and the 10-minute policy walked three times as often."""
    clip_param: float = 0.2
    """PPO ratio clip."""
    gamma: float = 0.99
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda."""
    entropy_coef: float = 0.003
    """Entropy bonus weight."""
    value_loss_coef: float = 1.0
    """Value loss weight."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    actor_hidden_dims: tuple = (128, 64, 32)
    """Hidden layer sizes of the actor MLP: on 2 CPU cores [128, 64, 32] costs ~45 us a sample in the
    update against ~115 for [256, 128, 64] and learned as fast per sample, so more samples a minute."""
    critic_hidden_dims: tuple = (128, 64, 32)
    """Hidden layer sizes of the critic MLP."""
    activation: str = "elu"
    """Activation of both MLPs (rsl_rl names: elu, relu, tanh, ...)."""
    init_std: float = 0.3
    """Initial standard deviation of the Gaussian action noise. With entropy_coef 0.003 the std settles
    near 0.2; 0.5 with 0.01 let it grow to 0.84 and the 10-minute policy barely walked."""
    obs_normalization: bool = True
    """Empirical observation normalisation in actor and critic (baked into the exported ONNX graph)."""
    init_at_random_ep_len: bool = True
    """Start episodes at random lengths so that time-outs do not happen in lock step."""
    symmetry_augmentation: bool = False
    """Append the left-right mirror image of every mini-batch (rsl_rl's symmetry extension,
    Mittal et al. 2024; maps from motionvl.envs.mirror): the policy learns both sides from each
    sample and cannot keep a one-way bias. Off: the loop runs 1.56x slower on a CPU for no gain at 10
    minutes; with compute to spare (a GPU) it is worth a try for a long run, where three seeds of four
    tracked the command sweep better and fell less after pushes (the fourth walked straight-kneed)."""
    mirror_loss_coeff: float = 0.0
    """Weight of the mirror loss (MSE between the actor on mirrored observations and its mirrored
    actions); 0 = off. With either option on, the loss is logged as 'symmetry'. Without augmentation
    the trainer computes it with motionvl.rl.mirror_loss.LeanMirrorLoss (rsl_rl's loss and gradient,
    without differentiating the original rows; 1.26x the loop). For a task that asks for a symmetric
    gait; on walking alone it met the 10-minute goal on the same seeds as without it."""
    velocity_estimator: bool = True
    """Concurrent state estimation (Ji et al. 2022, motionvl.rl.estimator): a small network inside the
    actor estimates the base velocity from the actor's observations, fitted to the critic's privileged
    base_lin_vel after each PPO update, and the policy MLP gets the estimate as an extra input. It is
    part of the exported ONNX graph (the robot feeds the same observations). The regression makes
    estimator_num_epochs x num_mini_batches Adam steps over each rollout. Its
    loss is logged as 'estimator' (mean squared error of the scaled velocity). On: the 10-minute policies
    walk at the commanded pace far more often, for a 7-14% slower loop."""
    estimator_hidden_dims: tuple = (64, 32)
    """Hidden layer sizes of the velocity estimator."""
    estimator_learning_rate: float = 1.0e-3
    """Adam learning rate of the estimator's regression (its own optimiser; PPO's never touches it)."""
    estimator_num_epochs: int = 5
    """Passes of the estimator's regression over each rollout (num_mini_batches Adam steps each). One or
    two passes take most of the estimator's cost out of the loop, but each lost one of three seeds'
    10-minute goal."""


@dataclasses.dataclass
class SelectionConfig:
    """Choose the exported policy on held-out episodes over the last stretch of the run (motionvl.rl.selection)."""

    minutes: float = 1.5
    """Length of the final stretch of the time budget in which candidates are validated, at most a
    quarter of the budget; 0 = off (policy.onnx is the policy the run ends on). The validation time
    is part of the budget: a longer stretch leaves fewer training iterations."""
    iterations: int = 60
    """The same for an iteration budget (max_iterations): candidates are validated over the last
    `iterations` PPO iterations of it (at most a quarter of it; 0 = off), and the validation does not
    cost training iterations. Such a run ends on the same iterate and validates the same candidates
    on any machine; a time budget stops where the machine's speed puts it."""
    every: int = 10
    """PPO iterations between validated candidates within the stretch."""
    episodes: int = 128
    """Randomised validation episodes per candidate (all candidates see the same episodes)."""
    seconds: float = 10.0
    """Length of each validation episode."""
    command: tuple = DEFAULT_COMMAND
    """Velocity command (vx, vy, yaw rate) of the validation episodes: the task the policy is chosen for (a run
    with a `task` uses the task's)."""
    seed: int = 7000
    """Evaluation seed of the validation episodes; keep it apart from the seeds the policy is tested
    with afterwards (bench/time_to_walk.py: its --seed S and S + 1000 upwards), or the choice is
    tested on its own data."""
    training_physics: bool = True
    """Validate at the training physics (env.sim_dt x env.decimation: PD at 200 Hz) instead of the
    robot config's (500 Hz, the rate `motionvl eval` and the goals' evaluations run at): ~0.6x the
    validation time (fewer physics steps; the policy and the bookkeeping cost the same), which a time
    budget spends on training instead. On eight 10-minute runs' candidates it chose as well as the
    robot's rate did; false ranks them on the deployment's."""
    final_candidates: bool = True
    """Also validate the policy the run ends on and, with policy averaging, the last iterate itself
    (its own candidate: selection/policy_<it>_iterate.onnx). With a time budget the run keeps the
    time of these validations free at its end (as long as the last validation took, or before the
    first one as long as the last rollout's cost per physics step says it will), so training stops
    that much earlier. Only a run whose final stretch validated a candidate adds them (a budget
    too short for the grid exports what it ends on, as before); Ctrl-C or a callback skips them."""

    def enabled_for(self, max_iterations: int | None) -> bool:
        """Whether a run with this iteration budget (None: a time budget alone) validates anything."""
        return self.minutes > 0 or (max_iterations is not None and self.iterations > 0)


@dataclasses.dataclass
class TrainConfig:
    """Everything a training run needs apart from the reward spec and the robot config."""

    seed: int = 0
    """Seed of torch and of the environment (overrides env.seed)."""
    device: str = "auto"
    """'auto' (CUDA when torch sees a GPU, else CPU), 'cpu', 'cuda' or 'cuda:N'."""
    minutes: float = 10.0
    """Wall-clock budget of the whole run in minutes (summed over resumed sessions)."""
    max_iterations: int | None = None
    """Stop after this many PPO iterations in total (None: only the time budget counts)."""
    save_interval: int = 25
    """Iterations between checkpoints (a killed run loses at most this many iterations)."""
    torch_threads: int | None = 1
    """torch intra-op threads during the rollout, where policy inference alternates with MuJoCo's
    physics threads (None: torch's default). 1 on CPU: 2 made the rollout ~15% slower on 2 cores."""
    update_torch_threads: int | None = 2
    """Most torch intra-op threads of the PPO update, when the physics threads are idle (capped at the cores this
    process may use; None: keep torch_threads). Alone on 2 cores 2 threads cut the update from ~0.33 to ~0.23 s
    per iteration; beside another busy process they make it 10-30x slower (see adapt_update_threads)."""
    adapt_update_threads: bool = True
    """Choose the update's thread count among 1..update_torch_threads from the update's own measured time as
    training runs (motionvl.rl.threads): the most threads alone, one when another process holds a core. The
    count then follows the machine's load, so two runs of one config may differ in the last bits of their
    float sums; false keeps runs (and a run and its resumption) bit-identical on one machine."""
    policy_average_iterations: float = 10.0
    """Export (and evaluate) the exponential moving average of the actor's weights with a time
    constant of this many PPO iterations instead of the last iterate; 0 = the last iterate. With
    averaging on, the last iterate is exported beside it as policy_last_iterate.onnx. Training
    always continues on the last iterate (motionvl.rl.averaging). 10 (~8 s of training here): consecutive
    iterates walk very differently and their average is steadier (10-minute policies of three seeds walked
    96 / 91 / 95% of episodes against 87 / 85 / 98% for the iterate they ended on); longer horizons lag a
    policy that is still improving."""
    reward_cost_limit: float | None = DEFAULT_COST_LIMIT
    """The generated reward terms' CPU time per training step may be at most this many times the reference
    reward's (config/rewards/reference.yaml) on the same batches, judged over windows of 24 steps: a candidate
    over it fails in training within a window, with the reason (rewards/sandbox/cost.py). null: no bound
    beyond the sandbox's per-call deadline and work budget. Why 8: rewards.spec.DEFAULT_COST_LIMIT."""
    task: dict | None = None
    """The task this run trains for (motionvl.task.Task.to_dict(): sentence, command, terrain, criterion; the search
    sets it): the held-out selection validates at its command, terrain and criterion instead of selection.command,
    and the exported policies' metadata records it. None: no task."""
    warm_start: str | None = None
    """Start the networks from another run: its run directory (the checkpoint it stopped at) or one
    checkpoint file of it; the reward spec may differ (motionvl.rl.warm_start says what carries over).
    None: from scratch. Only a new run uses it; a resumed one continues from its own checkpoints."""
    selection: SelectionConfig = dataclasses.field(default_factory=SelectionConfig)
    """Validation of the last iterates on held-out episodes (selection section of the YAML)."""
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    """Environment used for training (env section of the YAML)."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    """PPO / network / rollout settings (ppo section of the YAML)."""

    # ------------------------------------------------------------------ I/O
    @classmethod
    def from_dict(cls, raw: dict | None, where: str = "training config") -> "TrainConfig":
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
        raw = dict(raw or {})
        env = EnvConfig.from_dict(raw.pop("env", None), f"{where}: env")
        ppo = dataclass_from_dict(PPOConfig, raw.pop("ppo", None) or {}, f"{where}: ppo")
        cfg = dataclass_from_dict(cls, raw, where, skip=("env", "ppo"))
        cfg.env, cfg.ppo = env, ppo
        cfg.validate(where)
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path | None = None, overrides=()) -> "TrainConfig":
        """Read a training YAML (default: the package's config/training.yaml), then apply
        `overrides` ("ppo.desired_kl=0.03" ..., see apply_overrides) before validation."""
        path = Path(path) if path is not None else package_root() / DEFAULT_TRAINING_CONFIG
        if not path.exists():
            raise ConfigError(f"training config not found: {path}")
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not overrides:
            return cls.from_dict(raw, str(path))
        return cls.from_dict(apply_overrides(raw, overrides, str(path)), f"{path} with overrides {list(overrides)}")

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))

    def validate(self, where: str = "training config") -> None:
        p, env, rnd = self.ppo, self.env, self.env.randomization
        batch = env.num_envs * p.num_steps_per_env
        checks = [
            (env.num_envs >= 1, "env.num_envs must be >= 1"),
            (env.commands.heading_gain >= 0, "env.commands.heading_gain must be >= 0"),
            (env.commands.task is None or len(env.commands.task) == 3, "env.commands.task must be [vx, vy, yaw_rate]"),
            (is_number(env.commands.task_share) and 0.0 <= env.commands.task_share <= 1.0,
             "env.commands.task_share must be in [0, 1]"),
            (len(env.commands.task_spread) == 3 and all(is_number(v) and v >= 0 for v in env.commands.task_spread),
             "env.commands.task_spread must be three numbers >= 0"),
            (self.task is None or isinstance(self.task, dict), "task must be a mapping (motionvl.task.Task.to_dict())"),
            (p.num_steps_per_env >= 1 and p.num_learning_epochs >= 1, "ppo.num_steps_per_env and num_learning_epochs must be >= 1"),
            (1 <= p.num_mini_batches <= batch, f"ppo.num_mini_batches must be in [1, num_envs*num_steps_per_env={batch}]"),
            (p.schedule in ("adaptive", "fixed"), "ppo.schedule must be 'adaptive' or 'fixed'"),
            (p.mirror_loss_coeff >= 0, "ppo.mirror_loss_coeff must be >= 0"),
            (is_number(p.desired_kl) and p.desired_kl > 0, "ppo.desired_kl must be a number > 0"),
            (len(p.actor_hidden_dims) > 0 and len(p.critic_hidden_dims) > 0, "ppo hidden dims must not be empty"),
            (len(p.estimator_hidden_dims) > 0 and p.estimator_learning_rate > 0,
             "ppo.estimator_hidden_dims must not be empty and ppo.estimator_learning_rate must be > 0"),
            (is_count(p.estimator_num_epochs) and p.estimator_num_epochs >= 1, "ppo.estimator_num_epochs must be an integer >= 1"),
            (self.save_interval >= 1, "save_interval must be >= 1"),
            (rnd.push_velocity >= 0, "env.randomization.push_velocity must be >= 0"),
            (len(rnd.latency_range) == 2 and all(is_count(v) for v in rnd.latency_range)
             and 1 <= rnd.latency_range[0] <= rnd.latency_range[1],
             "env.randomization.latency_range must be [low, high], integers with 1 <= low <= high"),
            (self.policy_average_iterations == 0 or self.policy_average_iterations >= 1,
             "policy_average_iterations must be 0 (off) or >= 1"),
            (self.minutes > 0, "minutes must be > 0"),
            (self.reward_cost_limit is None or (is_number(self.reward_cost_limit) and self.reward_cost_limit > 0),
             f"reward_cost_limit must be null or a number > 0, got {self.reward_cost_limit!r}"),
            (self.warm_start is None or (isinstance(self.warm_start, str) and self.warm_start.strip()),
             f"warm_start must be null or the path of a run directory or checkpoint, got {self.warm_start!r}"),
            (self.max_iterations is None or (is_count(self.max_iterations) and self.max_iterations >= 1),
             f"max_iterations must be null or an integer >= 1, got {self.max_iterations!r}"),
            (self.selection.minutes >= 0, "selection.minutes must be >= 0"),
            (is_count(self.selection.iterations), "selection.iterations must be an integer >= 0"),
            (self.selection.every >= 1 and self.selection.episodes >= 1 and self.selection.seconds > 0,
             "selection.every and selection.episodes must be >= 1, selection.seconds > 0"),
            (len(self.selection.command) == 3, "selection.command must be [vx, vy, yaw_rate]"),
            (self.torch_threads is None or self.torch_threads >= 1, "torch_threads must be >= 1 or null"),
            (self.update_torch_threads is None or self.update_torch_threads >= 1, "update_torch_threads must be >= 1 or null"),
            (self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda"), "device must be auto, cpu or cuda[:N]"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(f"{where}: {msg}")
        valid = {"gait_period_s": lambda v: v > 0, "rough_fraction": lambda v: 0 <= v <= 1}
        for name, schedule_name in env.SCHEDULES.items():
            value, schedule = getattr(env, name), getattr(env, schedule_name)
            problems = [] if is_number(value) and valid[name](value) else [f"env.{name}: {value!r} is out of range"]
            if schedule is not None:
                problems += schedule.errors(f"env.{schedule_name}", valid[name])
            if problems:
                raise ConfigError(f"{where}: {'; '.join(problems)}")

    # ------------------------------------------------------------------ rsl_rl
    def resolved_device(self) -> str:
        return resolve_device(self.device)

    def to_rsl_rl(self) -> dict:
        """The nested train_cfg dict of rsl_rl's OnPolicyRunner (rsl-rl-lib 5.x)."""
        p = self.ppo
        model = lambda dims, dist: {  # noqa: E731
            "class_name": "rsl_rl.models.MLPModel", "hidden_dims": list(dims), "activation": p.activation,
            "obs_normalization": p.obs_normalization,
            **({"distribution_cfg": {"class_name": "rsl_rl.modules.GaussianDistribution", "init_std": p.init_std,
                                     "std_type": "scalar"}} if dist else {})}
        actor = model(p.actor_hidden_dims, True)
        if p.velocity_estimator:
            actor.update({"class_name": "motionvl.rl.estimator:VelocityEstimatorModel",
                          "estimator_hidden_dims": list(p.estimator_hidden_dims)})
        return {
            "num_steps_per_env": p.num_steps_per_env,
            "save_interval": self.save_interval,
            "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
            "check_for_nan": True,
            "logger": "tensorboard",
            "actor": actor,
            "critic": model(p.critic_hidden_dims, False),
            "algorithm": {
                "class_name": "rsl_rl.algorithms.PPO", "num_learning_epochs": p.num_learning_epochs,
                "num_mini_batches": p.num_mini_batches, "clip_param": p.clip_param, "gamma": p.gamma, "lam": p.lam,
                "value_loss_coef": p.value_loss_coef, "entropy_coef": p.entropy_coef, "learning_rate": p.learning_rate,
                "max_grad_norm": p.max_grad_norm, "use_clipped_value_loss": True, "schedule": p.schedule,
                "desired_kl": p.desired_kl,
                "symmetry_cfg": ({"data_augmentation_func": "motionvl.rl.vecenv:mirror_batch",
                                  "use_data_augmentation": p.symmetry_augmentation,
                                  "use_mirror_loss": p.mirror_loss_coeff > 0, "mirror_loss_coeff": p.mirror_loss_coeff}
                                 if p.symmetry_augmentation or p.mirror_loss_coeff > 0 else None),
            },
        }


# ---------------------------------------------------------------------- dict <-> dataclass
def apply_overrides(raw, overrides, where: str = "training config") -> dict:
    """A copy of the YAML mapping `raw` with each "dotted.key=value" of `overrides` set; the value
    is read as YAML ("0.03", "true", "[256, 128]"). Keys are checked later, by from_dict, like
    the file's own, so a misspelt key is an error rather than a silent no-op."""
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    out = copy.deepcopy(raw or {})
    for item in overrides:
        key, sep, text = str(item).partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"override {item!r}: expected KEY=VALUE with a dotted key, e.g. ppo.desired_kl=0.03")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML: {exc}") from exc
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {'.'.join(parts[:depth + 1])} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


# ---------------------------------------------------------------------- dataclass -> argparse
def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, names=None, helps=None, defaults=None) -> None:
    """One --option per dataclass field (or per field in `names`): type from the default, help from the field
    docstring (or `helps[name]`). `defaults` `{name: (value, why)}`: a command whose default differs from the
    field's on purpose; the help gives both and the reason.

    Field metadata may set "flags" (option strings), "nargs", "type", "choices", "metavar", "required",
    "action" (e.g. "append" for a repeatable option; give it a None default, as argparse appends to
    the default object itself) and "unset" (true: the option's default is None, not given; the help says
    what that means).
    """
    docs = field_docs(cls) if helps is None else helps
    for f in dataclasses.fields(cls):
        if names is not None and f.name not in names:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        flags = f.metadata.get("flags") or (f"--{f.name.replace('_', '-')}",)
        kw = {"dest": f.name, "default": default, "help": docs.get(f.name, "")}
        if isinstance(default, bool):
            kw["action"] = argparse.BooleanOptionalAction
        else:
            for key in ("nargs", "type", "choices", "metavar", "required", "action"):
                if key in f.metadata:
                    kw[key] = f.metadata[key]
            if "type" not in kw and default is not None and not isinstance(default, (tuple, list)):
                kw["type"] = type(default)
            if f.metadata.get("unset"):
                kw["default"] = None
        if defaults and f.name in defaults:
            kw["default"], why = defaults[f.name]
            kw["help"] += f" (default here: {kw['default']}, {why}; {cls.__name__}'s: {default})"
        elif kw["default"] not in (None, "") and not isinstance(default, bool):
            kw["help"] += f" (default: {default})"
        parser.add_argument(*flags, **kw)


def args_to_dataclass(args: argparse.Namespace, cls):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})
