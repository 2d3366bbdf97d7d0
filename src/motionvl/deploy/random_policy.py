"""A random, untrained ONNX policy with a robot's contract: what tests, the deployment benchmark and
the launch test run when the question is the deployment's mechanics or timing, not walking.

It is named for what it is: its actions are tanh of a random linear map of the observation.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from motionvl.robot import RobotConfig, load_robot_config


def write_random_policy(path, robot: RobotConfig | None = None, kind: str = "random", seed: int = 0, **contract):
    """A small ONNX policy with `robot`'s contract (default: the package's robot), untrained (no torch):
    actions = tanh(obs W), W random. kind 'nan': one action is NaN; kind 'hang': a step never ends
    once the observation is not all zeros (a Loop of ~1e15 empty iterations: warm-up, on zeros, passes;
    the first step in STAND or RUN hangs until ONNX Runtime is told to terminate the run), for the fault
    tests of a hung policy in a node's own process. `contract`: fields replaced in the PolicyContract
    (to build a mismatch). Returns the path. (A merely slow step is not built into a graph: how long a
    graph runs depends on the machine; tests make a step slow by sleeping in it.)"""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from motionvl.envs.config import EnvConfig
    from motionvl.policy_io import PolicyContract

    robot = robot or load_robot_config()
    c = dataclasses.replace(PolicyContract.for_training(robot, EnvConfig()), **contract)
    rng = np.random.default_rng(seed)
    weights = {"W": (rng.standard_normal((c.num_obs, c.num_joints)) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["obs", "W"], ["z"]), helper.make_node("Tanh", ["z"], ["a"])]
    out = "a"
    if kind == "nan":
        weights["poison"] = np.where(np.arange(c.num_joints) == 3, np.nan, 0.0).astype(np.float32)[None]
        nodes.append(helper.make_node("Add", [out, "poison"], ["actions"]))
    elif kind == "hang":
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
            "spin", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                     helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [])],
            [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
        weights.update(big=np.array(1e15, np.float32), true=np.array(True), zero=np.array(0.0, np.float32))
        nodes += [helper.make_node("ReduceL1", ["obs"], ["size"], keepdims=0),
                  helper.make_node("Mul", ["size", "big"], ["trips_f"]),
                  helper.make_node("Cast", ["trips_f"], ["trips"], to=TensorProto.INT64),
                  helper.make_node("Loop", ["trips", "true", "zero"], ["spun"], body=body),
                  helper.make_node("Mul", ["spun", "zero"], ["nothing"]),
                  helper.make_node("Add", [out, "nothing"], ["actions"])]
    else:
        nodes.append(helper.make_node("Identity", [out], ["actions"]))
    graph = helper.make_graph(nodes, "policy", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", c.num_obs])],
                              [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", c.num_joints])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    helper.set_model_props(model, {k: json.dumps(v) for k, v in c.to_metadata().items()})
    onnx.save(model, str(path))
    return Path(path)
