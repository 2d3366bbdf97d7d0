"""The training graph's node set, decided in one place for both ways of starting it.

`ros2 launch motionvl train.launch.py` starts these nodes as processes; `motionvl train`
(motionvl.ros.train_graph) starts them as node objects in its process, its trainers as processes. Both
ask `training_nodes` which nodes to start, so the two routes run the same graph (tested).
"""

from __future__ import annotations

import dataclasses
import re

from motionvl.search.run_args import PLAYBACKS
NAMESPACE_PATTERN = re.compile(r"^/?[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$")


@dataclasses.dataclass(frozen=True)
class GraphNode:
    """One node of the training graph."""

    name: str
    """The node's name (policy_trainer_<i> for trainer i)."""
    executable: str
    """Its console script (one per node module)."""
    section: str
    """Its section of the params files (config/nodes.yaml): the name, policy_trainer for every trainer."""
    playback_layer: bool = False
    """Takes config/simulation_playback.yaml over the params file (the playback's simulated robot)."""
    floor: bool = False
    """Builds a world and takes the task's terrain and level."""


def training_nodes(*, synthesizer_node: bool, playback: str, trainers: int, render: bool, critic: str,
                   record: bool) -> list[GraphNode]:
    """The nodes a search needs, in start order (the orchestrator last).

    synthesizer_node: the orchestrator asks a reward_synthesizer node (false: it synthesizes in its process, or
    the mode, reference, synthesizes nothing). playback "ros" plays each candidate on the
    graph: simulator, deployment (simulation mode) and vlm_critic, plus camera_renderer when frames are wanted
    (rendering on, or a critic that sees); "in_process" plays in the orchestrator: none of them.
    """
    if playback not in PLAYBACKS:
        raise ValueError(f"playback must be one of {PLAYBACKS}, got {playback!r}")
    if trainers < 1:
        raise ValueError(f"trainers must be >= 1, got {trainers}")
    nodes = []
    if playback == "ros":
        nodes.append(GraphNode("simulator", "simulator_node", "simulator", playback_layer=True, floor=True))
        if render or critic != "kinematic":
            nodes.append(GraphNode("camera_renderer", "camera_renderer_node", "camera_renderer", playback_layer=True,
                                   floor=True))
        nodes.append(GraphNode("vlm_critic", "vlm_critic_node", "vlm_critic", floor=True))
        nodes.append(GraphNode("deployment", "deployment_node", "deployment", playback_layer=True))
    if synthesizer_node:
        nodes.append(GraphNode("reward_synthesizer", "reward_synthesizer_node", "reward_synthesizer"))
    nodes += [GraphNode(f"policy_trainer_{i}", "policy_trainer_node", "policy_trainer") for i in range(trainers)]
    if record:
        nodes.append(GraphNode("recorder", "recorder_node", "recorder"))
    nodes.append(GraphNode("orchestrator", "orchestrator_node", "orchestrator"))
    return nodes


def namespace(text: str | None) -> str:
    """A graph's ROS namespace as an absolute name ('' for the root): 'lab1' and '/lab1' are '/lab1'. Two searches
    on one ROS domain need different namespaces (or domains): their nodes would otherwise share names and topics."""
    text = (text or "").strip().rstrip("/")
    if not text:
        return ""
    if not NAMESPACE_PATTERN.match(text):
        raise ValueError(f"namespace {text!r} is not a ROS name (letters, digits and _, each part starting with a letter)")
    return text if text.startswith("/") else "/" + text


def node_section(params: dict, name: str) -> dict:
    """The `ros__parameters` a node named `name`, in any namespace, takes from a params file's content: the sections
    keyed `/**`, `name`, `/name` or `/**/name`, later ones over earlier ones as ROS merges them (the shipped files
    key their sections `/**/name` so that they reach a node in a namespace too)."""
    merged: dict = {}
    for key, section in (params or {}).items():
        if key in ("/**", name, f"/{name}", f"/**/{name}"):
            merged.update((section or {}).get("ros__parameters") or {})
    return merged
