"""ONNX export of the actor with the deployment contract in the file, and loading it back.

The exported graph maps the actor observation "obs" [batch, num_obs] (already scaled as the
contract's layout says) to "actions" [batch, num_joints] in [-action_clip, action_clip]:
observation normalisation, the MLP and the action clip are all inside the graph. Metadata props
(each a JSON string) carry the policy contract (`motionvl.policy_io.PolicyContract.to_metadata`:
joint order, default pose, gains, limits, action law, observation layout, history, gait clock and
feed-forward, command ranges, control period), so whatever runs the policy builds its inputs with
`motionvl.policy_io` and refuses a robot that does not fit (`PolicyContract.check_robot`).
A policy trained with the velocity estimator also carries `velocity_estimator`: what the graph
estimates from "obs" on its own (the robot feeds nothing extra), so a reader of the file knows
the actions rest on an estimate of the base velocity, not on a measurement.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import warnings
from pathlib import Path

import numpy as np

from motionvl.policy_io import ContractError, PolicyContract

try:  # torch is needed to export, not to run a policy (the robot computer has onnxruntime only)
    import torch
except ImportError:  # pragma: no cover
    torch = None

ONNX_OPSET = 18
__all__ = ["ContractError", "OnnxPolicy", "PolicyExportWrapper", "export_policy", "load_policy"]


class PolicyExportWrapper(torch.nn.Module if torch is not None else object):
    """Deterministic actor for export: normaliser -> [velocity estimator] -> MLP -> mean action -> clip
    (copies, not views). An actor with an `estimator` (motionvl.rl.estimator) feeds the MLP the
    normalised observations followed by the estimator's output on them, as in training.

    rsl_rl's empirical normaliser, (obs - mean) / (std + eps), is held as two buffers, `obs_mean` and
    `obs_scale` = std + eps: the exporter would otherwise fold std + eps into an unnamed constant, and
    every graph tensor has to carry a state-dict name for `export_policy` to reuse the graph."""

    def __init__(self, actor, action_clip: float = 1.0):
        super().__init__()
        norm = actor.obs_normalizer
        if hasattr(norm, "eps") and hasattr(norm, "std"):
            self.obs_normalizer = None
            self.register_buffer("obs_mean", norm.mean.detach().cpu().clone())
            self.register_buffer("obs_scale", (norm.std + norm.eps).detach().cpu().clone())
        else:  # no normalisation (torch.nn.Identity)
            self.obs_normalizer = copy.deepcopy(norm).cpu()
        estimator = getattr(actor, "estimator", None)
        self.estimator = copy.deepcopy(estimator).cpu() if estimator is not None else None
        self.mlp = copy.deepcopy(actor.mlp).cpu()
        dist = getattr(actor, "distribution", None)
        self.deterministic_output = dist.as_deterministic_output_module() if dist is not None else torch.nn.Identity()
        self.action_clip = float(action_clip)
        self.num_obs = int(actor.obs_dim)

    def normalize(self, obs):
        """The observations as the actor's normaliser scales them."""
        return self.obs_normalizer(obs) if self.obs_normalizer is not None else (obs - self.obs_mean) / self.obs_scale

    def forward(self, obs):
        latent = self.normalize(obs)
        if self.estimator is not None:
            latent = torch.cat([latent, self.estimator(latent)], dim=-1)
        out = self.deterministic_output(self.mlp(latent))
        return torch.clamp(out, -self.action_clip, self.action_clip)

    def architecture(self) -> str:
        """What fixes the exported graph apart from the weights: modules, tensor shapes, clip, input width."""
        shapes = ",".join(f"{k}:{tuple(v.shape)}" for k, v in self.state_dict().items())
        return f"{self!r}|obs={self.num_obs}|clip={self.action_clip}|{shapes}"


def estimator_metadata(actor) -> dict:
    """What an exported actor with a velocity estimator (motionvl.rl.estimator) estimates inside its graph."""
    from motionvl.envs.locomotion import PRIVILEGED_LAYOUT
    from motionvl.rl.estimator import ESTIMATED_BLOCK

    scale = next(sc for name, _, sc in PRIVILEGED_LAYOUT if name == ESTIMATED_BLOCK)
    # "inside_graph": the estimate is computed from "obs" and feeds the MLP; it is neither an input nor an output
    return {"estimates": ESTIMATED_BLOCK, "size": int(actor.estimate_dim), "scale": float(scale),
            "frame": "body", "inside_graph": True}


_GRAPHS: dict = {}
"""The graph exported for each actor architecture (PolicyExportWrapper.architecture) in this process,
without metadata: torch.onnx.export costs 1.0-1.4 s per policy on 2 cores (5-7 s for the first in a
process, the exporter's set-up), and the held-out selection exports every candidate of a run."""

REUSE_TOLERANCE = 1e-5
"""Max abs difference between ONNX Runtime on a reused graph and the torch actor, else a full export."""


def export_policy(actor, path: str | Path, contract: PolicyContract, action_clip: float | None = None,
                  extra_metadata: dict | None = None) -> Path:
    """Write `actor` (an rsl_rl MLPModel) to ONNX at `path` with `contract` in the metadata props;
    the graph clips its actions at `action_clip` (None: the contract's). `extra_metadata`: further props
    (e.g. the run's `task`, motionvl.task.Task.to_dict()), never one of the contract's.

    The first actor of an architecture goes through torch.onnx.export; a later one of the same
    architecture gets its weights written into a copy of that graph, kept only if ONNX Runtime then
    reproduces the torch actor (within REUSE_TOLERANCE on a batch around the normaliser's mean)."""
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if action_clip is not None and float(action_clip) != contract.action_clip:
        contract = dataclasses.replace(contract, action_clip=float(action_clip))
    wrapper = PolicyExportWrapper(actor, contract.action_clip).eval()
    if wrapper.num_obs != contract.num_obs:
        raise ContractError(f"the actor takes {wrapper.num_obs} observations, its contract's layout has "
                            f"{contract.num_obs}")
    metadata = contract.to_metadata()
    if wrapper.estimator is not None:
        metadata = {**metadata, "velocity_estimator": estimator_metadata(actor)}
    clash = set(extra_metadata or {}) & set(metadata)
    if clash:
        raise ContractError(f"extra metadata may not replace the contract's {sorted(clash)}")
    metadata = {**metadata, **(extra_metadata or {})}
    key = wrapper.architecture()
    model = _with_weights(_GRAPHS[key], wrapper) if key in _GRAPHS else None
    if model is None:
        model = _torch_export(wrapper, path.with_suffix(".tmp.onnx"))
        _GRAPHS[key] = onnx.ModelProto()
        _GRAPHS[key].CopyFrom(model)
    onnx.helper.set_model_props(model, {k: json.dumps(v) for k, v in metadata.items()})
    model.producer_name = "motionvl"
    onnx.checker.check_model(model)
    tmp = path.with_suffix(".tmp.onnx")
    onnx.save(model, str(tmp))
    tmp.replace(path)
    return path


def _torch_export(wrapper: PolicyExportWrapper, tmp: Path):
    import onnx

    dummy = torch.zeros(2, wrapper.num_obs)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "torchvision is not installed" notices of the exporter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, (dummy,), str(tmp), input_names=["obs"], output_names=["actions"],
                          opset_version=ONNX_OPSET, dynamo=True, external_data=False, verbose=False,
                          dynamic_shapes=({0: torch.export.Dim("batch")},))
    quiet.setLevel(level)
    model = onnx.load(str(tmp))
    tmp.unlink()
    return model


def _with_weights(graph, wrapper: PolicyExportWrapper):
    """A copy of `graph` with `wrapper`'s tensors in the initializers of the same names, or None when
    ONNX Runtime on it does not reproduce `wrapper` (a tensor the exporter folded or renamed)."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    state = wrapper.state_dict()
    model = onnx.ModelProto()
    model.CopyFrom(graph)
    for init in model.graph.initializer:
        if init.name in state:
            init.CopyFrom(numpy_helper.from_array(state[init.name].numpy(), init.name))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(64, wrapper.num_obs, generator=gen)
    if wrapper.obs_normalizer is None:  # inputs the policy meets, not far outside the training statistics
        obs = wrapper.obs_mean + obs * (wrapper.obs_scale * 2.0)
    with torch.no_grad():
        want = wrapper(obs).numpy()
    got = session.run(None, {session.get_inputs()[0].name: obs.numpy()})[0]
    return model if got.shape == want.shape and float(np.max(np.abs(got - want))) < REUSE_TOLERANCE else None


class OnnxPolicy:
    """An exported policy run with ONNX Runtime: `policy(obs) -> actions` on numpy arrays."""

    def __init__(self, path: str | Path, threads: int = 1):
        import onnxruntime as ort

        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"policy not found: {self.path}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT's own exception types (InvalidProtobuf, Fail, ...) are not importable stably
            raise ContractError(f"{self.path}: not a loadable ONNX model ({type(exc).__name__}: "
                                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else 'no message'})") from exc
        raw = self.session.get_modelmeta().custom_metadata_map
        self.metadata = {k: _json_or_str(v) for k, v in raw.items()}
        """Every metadata prop, JSON-decoded (the contract's and any other, e.g. velocity_estimator)."""
        if "joint_names" not in self.metadata or "format" not in self.metadata:
            raise ContractError(f"{self.path}: not a MotionVL policy (no policy contract in its metadata)")
        try:
            self.contract = PolicyContract.from_metadata(self.metadata)
        except ContractError as exc:
            raise ContractError(f"{self.path}: {exc}") from exc
        self.input_name = self.session.get_inputs()[0].name
        width = self.session.get_inputs()[0].shape[1]
        if isinstance(width, int) and width != self.contract.num_obs:
            raise ContractError(f"{self.path}: the graph takes {width} observations, its contract says "
                                f"{self.contract.num_obs}")
        self.num_obs = self.contract.num_obs
        self.num_actions = self.contract.num_actions

    @property
    def velocity_estimator(self) -> dict | None:
        """What the graph estimates internally (`estimator_metadata`); None for a policy without an estimator."""
        return self.metadata.get("velocity_estimator")

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float32)
        single = x.ndim == 1
        x = x[None] if single else x
        if x.shape[-1] != self.num_obs:
            raise ValueError(f"policy expects {self.num_obs} observations, got {x.shape[-1]}")
        out = self.session.run(None, {self.input_name: np.ascontiguousarray(x)})[0]
        return out[0] if single else out


def load_policy(path: str | Path, threads: int = 1) -> OnnxPolicy:
    return OnnxPolicy(path, threads)


def _json_or_str(value: str):
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value
