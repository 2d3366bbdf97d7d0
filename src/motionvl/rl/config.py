"""Training configuration: one nested dataclass (env + PPO + run), loadable from config/training.yaml.

`TrainConfig.to_rsl_rl()` turns it into the one nested dict that rsl_rl's `OnPolicyRunner` expects.
The helpers at the end build argparse options from a dataclass whose fields carry docstrings
(CleanRL style: the CLI arguments are a dataclass, the help text is the field's docstring).
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import inspect
import textwrap
from pathlib import Path

import yaml

from motionvl.device import resolve_device
from motionvl.envs.config import EnvConfig, dataclass_from_dict, linear_schedule
from motionvl.robot import ConfigError, package_root

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
    """Target KL divergence between consecutive policies for the adaptive schedule."""
    desired_kl_final: float | None = None
    """With a value, the adaptive schedule's target KL falls linearly from desired_kl to this over
    desired_kl_decay_iterations (PPO iterations of the run; a resumed run continues the schedule),
    which lowers the learning rate the schedule settles at late in a run. None: desired_kl throughout."""
    desired_kl_decay_iterations: tuple = (2000, 3500)
    """(first, last) PPO iteration of the linear fall to desired_kl_final."""
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
    """Hidden layer sizes of the actor MLP."""
    critic_hidden_dims: tuple = (128, 64, 32)
    """Hidden layer sizes of the critic MLP."""
    activation: str = "elu"
    """Activation of both MLPs (rsl_rl names: elu, relu, tanh, ...)."""
    init_std: float = 0.3
    """Initial standard deviation of the Gaussian action noise."""
    obs_normalization: bool = True
    """Empirical observation normalisation in actor and critic (baked into the exported ONNX graph)."""
    init_at_random_ep_len: bool = True
    """Start episodes at random lengths so that time-outs do not happen in lock step."""
    symmetry_augmentation: bool = False
    """Append the left-right mirror image of every mini-batch (rsl_rl's symmetry extension,
    Mittal et al. 2024; maps from motionvl.envs.mirror): the policy learns both sides from each
    sample and cannot keep a one-way bias. Doubles the PPO update's work."""
    mirror_loss_coeff: float = 0.0
    """Weight of the mirror loss (MSE between the actor on mirrored observations and its mirrored
    actions); 0 = off. With either option on, the loss is logged as 'symmetry'. Without augmentation
    the trainer computes it with motionvl.rl.mirror_loss.LeanMirrorLoss (rsl_rl's loss and gradient,
    without differentiating the original rows)."""
    mirror_loss_fraction: float = 1.0
    """Share of each mini-batch the mirror loss is computed on (the first rows of rsl_rl's randomly
    drawn mini-batch, so an unbiased estimate of the whole mini-batch's loss); 1 = all of it. Its
    extra cost in the update shrinks with it, a little less than in proportion (measured: 0.25 made
    the update 1.21x, the whole mini-batch 1.65x; bench/mirror_loss_cost.py). Only with mirror_loss_coeff > 0 and without
    symmetry_augmentation (whose loss rsl_rl computes over the whole augmented batch)."""
    velocity_estimator: bool = False
    """Concurrent state estimation (Ji et al. 2022, motionvl.rl.estimator): a small network inside the
    actor estimates the base velocity from the actor's observations, fitted to the critic's privileged
    base_lin_vel after each PPO update, and the policy MLP gets the estimate as an extra input. It is
    part of the exported ONNX graph (the robot feeds the same observations). The regression makes
    estimator_num_epochs x num_mini_batches Adam steps over each rollout. Its
    loss is logged as 'estimator' (mean squared error of the scaled velocity). The shipped
    training.yaml turns it on; this default stays off so that a run directory whose config copy
    predates the key resumes with the plain actor its checkpoints hold."""
    estimator_hidden_dims: tuple = (64, 32)
    """Hidden layer sizes of the velocity estimator."""
    estimator_learning_rate: float = 1.0e-3
    """Adam learning rate of the estimator's regression (its own optimiser; PPO's never touches it)."""
    estimator_num_epochs: int = 5
    """Passes of the estimator's regression over each rollout (num_mini_batches Adam steps each). 5 is
    what every run before the key used (it followed num_learning_epochs), so their run directories
    resume unchanged. One or two passes take most of the estimator's cost out of the loop, but each lost
    one of three seeds' 10-minute goal (bench/RESULTS.md, "Fewer regression passes for the estimator")."""

    def desired_kl_at(self, iteration: int) -> float:
        """Target KL of training iteration `iteration` under the desired_kl schedule."""
        return linear_schedule(self.desired_kl, self.desired_kl_final, self.desired_kl_decay_iterations, iteration)


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
    command: tuple = (0.6, 0.0, 0.0)
    """Velocity command (vx, vy, yaw rate) of the validation episodes: the task the policy is chosen for."""
    seed: int = 7000
    """Evaluation seed of the validation episodes; keep it apart from the seeds the policy is tested
    with afterwards (bench/time_to_walk.py: its --seed S and S + 1000 upwards), or the choice is
    tested on its own data."""
    training_physics: bool = True
    """Validate at the training physics (env.sim_dt x env.decimation: PD at 200 Hz) instead of the
    robot config's (500 Hz, the rate `motionvl eval` and the goals' evaluations run at): ~0.6x the
    validation time (fewer physics steps; the policy and the bookkeeping cost the same), which a time
    budget spends on training instead. On eight 10-minute runs' candidates it chose as well as the
    robot's rate did (bench/RESULTS.md, seventy-fourth run); false ranks them on the deployment's."""
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
    save_interval: int = 50
    """Iterations between checkpoints (a killed run loses at most this many iterations)."""
    torch_threads: int | None = 1
    """torch intra-op threads during the rollout, where policy inference alternates with MuJoCo's
    physics threads (None: torch's default). 1 on CPU: 2 made the rollout ~15% slower on 2 cores."""
    update_torch_threads: int | None = 2
    """torch intra-op threads during the PPO update, when the physics threads are idle (capped at
    the cores this process may use; None: keep torch_threads). On 2 cores 2 threads cut the update
    from ~0.33 to ~0.23 s per iteration (+12% whole-loop steps/s); a second process sharing the
    cores (two trainings side by side) makes it worse, set 1 then."""
    policy_average_iterations: float = 10.0
    """Export (and evaluate) the exponential moving average of the actor's weights with a time
    constant of this many PPO iterations instead of the last iterate; 0 = the last iterate. With
    averaging on, the last iterate is exported beside it as policy_last_iterate.onnx. Training
    always continues on the last iterate (motionvl.rl.averaging). 10 (~8 s of training here):
    longer horizons lag a policy that is still improving (bench/RESULTS.md, policy averaging)."""
    policy_average_growth: float = 0.0
    """Let the averaging time constant grow with training: max(policy_average_iterations, this x
    iteration) iterations (0.04: 10 until iteration 250, ~180 after 60 minutes here). 0 = fixed.
    "Iteration" counts the average's updates: the same as the run's iteration unless averaging
    was switched on when resuming a run that had none.
    On one 60-minute run 0.01-0.04 were within noise of the fixed 10 (bench/RESULTS.md, fifth run)."""
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
        p = self.ppo
        batch = self.env.num_envs * p.num_steps_per_env
        rnd = self.env.randomization
        checks = [
            (self.env.num_envs >= 1, "env.num_envs must be >= 1"),
            (self.env.commands.heading_gain >= 0, "env.commands.heading_gain must be >= 0"),
            (p.num_steps_per_env >= 1 and p.num_learning_epochs >= 1, "ppo.num_steps_per_env and num_learning_epochs must be >= 1"),
            (1 <= p.num_mini_batches <= batch, f"ppo.num_mini_batches must be in [1, num_envs*num_steps_per_env={batch}]"),
            (p.schedule in ("adaptive", "fixed"), "ppo.schedule must be 'adaptive' or 'fixed'"),
            (p.mirror_loss_coeff >= 0, "ppo.mirror_loss_coeff must be >= 0"),
            (_is_number(p.mirror_loss_fraction, above=0) and p.mirror_loss_fraction <= 1,
             f"ppo.mirror_loss_fraction must be a number in (0, 1], got {p.mirror_loss_fraction!r}"),
            (p.mirror_loss_fraction == 1 or (p.mirror_loss_coeff > 0 and not p.symmetry_augmentation),
             "ppo.mirror_loss_fraction < 1 has no effect without mirror_loss_coeff > 0 or with "
             "symmetry_augmentation (rsl_rl then computes the loss over the whole augmented batch)"),
            (p.desired_kl > 0 and (p.desired_kl_final is None or _is_number(p.desired_kl_final, above=0)),
             "ppo.desired_kl and desired_kl_final must be numbers > 0 (final may be null)"),
            (_is_iteration_span(p.desired_kl_decay_iterations),
             "ppo.desired_kl_decay_iterations must be [first, last] with 0 <= first <= last"),
            (len(p.actor_hidden_dims) > 0 and len(p.critic_hidden_dims) > 0, "ppo hidden dims must not be empty"),
            (len(p.estimator_hidden_dims) > 0 and p.estimator_learning_rate > 0,
             "ppo.estimator_hidden_dims must not be empty and ppo.estimator_learning_rate must be > 0"),
            (_is_count(p.estimator_num_epochs) and p.estimator_num_epochs >= 1, "ppo.estimator_num_epochs must be an integer >= 1"),
            (self.save_interval >= 1, "save_interval must be >= 1"),
            (_is_count(self.env.rough_from_iteration), "env.rough_from_iteration must be an integer >= 0"),
            (self.env.gait_period_s > 0 and (self.env.gait_period_final_s is None
                                             or _is_number(self.env.gait_period_final_s, above=0)),
             "env.gait_period_s and gait_period_final_s must be numbers > 0 (final may be null)"),
            (_is_iteration_span(self.env.gait_period_change_iterations),
             "env.gait_period_change_iterations must be [first, last] with 0 <= first <= last"),
            (rnd.push_velocity >= 0 and (rnd.push_velocity_final is None or _is_number(rnd.push_velocity_final, at_least=0)),
             "env.randomization.push_velocity and push_velocity_final must be numbers >= 0 (final may be null)"),
            (_is_iteration_span(rnd.push_decay_iterations),
             "env.randomization.push_decay_iterations must be [first, last] with 0 <= first <= last"),
            (len(rnd.latency_range) == 2 and all(_is_count(v) for v in rnd.latency_range)
             and 1 <= rnd.latency_range[0] <= rnd.latency_range[1],
             "env.randomization.latency_range must be [low, high], integers with 1 <= low <= high"),
            (rnd.latency_max_start is None or (_is_count(rnd.latency_max_start) and len(rnd.latency_range) == 2
                                               and rnd.latency_range[0] <= rnd.latency_max_start <= rnd.latency_range[1]),
             "env.randomization.latency_max_start must be null or an integer within latency_range"),
            (_is_iteration_span(rnd.latency_widen_iterations),
             "env.randomization.latency_widen_iterations must be [first, last] with 0 <= first <= last"),
            (self.policy_average_iterations == 0 or self.policy_average_iterations >= 1,
             "policy_average_iterations must be 0 (off) or >= 1"),
            (self.policy_average_growth >= 0, "policy_average_growth must be >= 0"),
            (self.minutes > 0, "minutes must be > 0"),
            (self.warm_start is None or (isinstance(self.warm_start, str) and self.warm_start.strip()),
             f"warm_start must be null or the path of a run directory or checkpoint, got {self.warm_start!r}"),
            (self.max_iterations is None or (_is_count(self.max_iterations) and self.max_iterations >= 1),
             f"max_iterations must be null or an integer >= 1, got {self.max_iterations!r}"),
            (self.selection.minutes >= 0, "selection.minutes must be >= 0"),
            (_is_count(self.selection.iterations), "selection.iterations must be an integer >= 0"),
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
        self.env.commands.validate(f"{where}: env.commands")

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


def _is_number(value, above: float | None = None, at_least: float | None = None) -> bool:
    """A number (a YAML boolean or string is not one) > `above` and >= `at_least` where given: the
    final value of a schedule, which the config loader passes through unchecked when its default is null."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (above is None or value > above) and (at_least is None or value >= at_least)


def _is_count(value) -> bool:
    """An integer >= 0 (a YAML boolean is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_iteration_span(span) -> bool:
    """[first, last] PPO iterations of a linear_schedule: two integers, 0 <= first <= last."""
    return len(span) == 2 and all(_is_count(v) for v in span) and span[0] <= span[1]


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
def field_docs(cls) -> dict:
    """{field name: docstring} from the string literal under each field of a dataclass."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body, docs = tree.body[0].body, {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls) -> None:
    """One --option per dataclass field: type from the default, help from the field docstring.

    Field metadata may set "flags" (option strings), "nargs", "type", "choices", "metavar", "required",
    "action" (e.g. "append" for a repeatable option; give it a None default, as argparse appends to
    the default object itself).
    """
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
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
        if default is not None and not isinstance(default, bool):
            kw["help"] += f" (default: {default})"
        parser.add_argument(*flags, **kw)


def args_to_dataclass(args: argparse.Namespace, cls):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})
