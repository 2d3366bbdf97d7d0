"""The policy on the robot: ONNX Runtime with capped threads, its contract checked, warmed up.

Loaded with onnxruntime alone (the robot computer runs no torch; `motionvl.rl.export.OnnxPolicy`
imports it for export). The contract in the file's metadata is read by `motionvl.policy_io`; a
layout it cannot build, or a robot-side fact that differs from the robot config (joint names and
order, default pose, gains, limits, action scale and mode, control period), refuses the policy
with a message naming each difference. Observations and targets come from `PolicyIO`, the same
code that training and evaluation run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from motionvl.policy_io import ContractError, PolicyContract, PolicyIO
from motionvl.robot import RobotConfig

WARMUP_RUNS = 20
"""Inferences before the policy may run: ONNX Runtime allocates and plans on its first calls."""


def non_finite_fields(contract: PolicyContract) -> list[str]:
    """Names of the contract's numeric fields holding NaN or inf (a NaN action clip or gait period
    passes every other check and turns finite actions into NaN targets or a frozen gait clock)."""
    bad = []
    for field in dataclasses.fields(contract):
        value = getattr(contract, field.name)
        if value is None:  # optional facts the contract does not carry
            continue
        try:
            numbers = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):  # names, blocks: not numbers
            continue
        if not np.all(np.isfinite(numbers)):
            bad.append(field.name)
    return bad


class DeployedPolicy:
    """One exported policy, ready to run on `robot`: `io` builds its observation and targets, `act` runs it."""

    def __init__(self, path: str | Path, robot: RobotConfig):
        import onnxruntime as ort

        self.path = Path(path)
        if not self.path.is_file():
            raise ContractError(f"policy not found: {self.path}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # no busy-waiting threads beside the control loop (with one thread there are none to spin,
        # but a build that starts a pool anyway must not spin it on the loop's cores)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT's exception types are not importable stably
            raise ContractError(f"{self.path}: not a loadable ONNX model ({type(exc).__name__}: "
                                f"{(str(exc).strip().splitlines() or ['no message'])[0]})") from exc
        meta = {}
        for key, value in self.session.get_modelmeta().custom_metadata_map.items():
            try:
                meta[key] = json.loads(value)
            except ValueError:
                meta[key] = value
        if "joint_names" not in meta:
            raise ContractError(f"{self.path}: not a MotionVL policy (no policy contract in its metadata)")
        try:
            self.contract = PolicyContract.from_metadata(meta)
            self.contract.check_robot(robot)
            non_finite = non_finite_fields(self.contract)
            if non_finite:
                raise ContractError(f"non-finite numbers in the contract: {non_finite}")
        except ContractError as exc:
            raise ContractError(f"{self.path.name}: {exc}") from exc
        except (ValueError, TypeError, KeyError, IndexError) as exc:  # metadata of the wrong types: a refusal
            raise ContractError(f"{self.path.name}: unreadable policy contract ({type(exc).__name__}: {exc})") from exc
        self.metadata = meta
        inputs = self.session.get_inputs()
        self.input_name = inputs[0].name
        width = inputs[0].shape[-1]
        if isinstance(width, int) and width != self.contract.num_obs:
            raise ContractError(f"{self.path.name}: the graph takes {width} observations, its contract's layout "
                                f"has {self.contract.num_obs}")
        self.io = PolicyIO(self.contract)
        self._obs = np.zeros((1, self.contract.num_obs), dtype=np.float32)
        """The input buffer every step writes into (no allocation per step)."""
        self.run_options = None
        """onnxruntime.RunOptions of the next runs (None: the defaults)."""
        self.warmup()

    @property
    def num_joints(self) -> int:
        return self.contract.num_joints

    def warmup(self, runs: int = WARMUP_RUNS) -> None:
        obs = np.zeros((1, self.contract.num_obs), dtype=np.float32)
        try:
            for _ in range(runs):
                out = self.session.run(None, {self.input_name: obs})[0]
        except Exception as exc:  # ORT's exception types are not importable stably
            raise ContractError(f"{self.path.name}: the graph does not run on an observation of its contract "
                                f"({type(exc).__name__}: {(str(exc).strip().splitlines() or ['no message'])[0]})") from exc
        if np.shape(out) != (1, self.num_joints):
            raise ContractError(f"{self.path.name}: the graph returns shape {np.shape(out)}, expected "
                                f"(1, {self.num_joints}) actions")

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, float]:
        """(the raw action (J,) float64, as the graph returned it: may hold NaN; inference seconds).
        The run takes `run_options` (onnxruntime.RunOptions, set by the policy's worker), through which
        another thread may end it."""
        x = self._obs
        x[0] = np.reshape(obs, -1)
        t0 = time.perf_counter()
        out = self.session.run(None, {self.input_name: x}, self.run_options)[0]
        return np.asarray(out, dtype=np.float64).reshape(-1), time.perf_counter() - t0
