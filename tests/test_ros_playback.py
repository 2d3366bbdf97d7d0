"""The search's playback on the ROS graph over real DDS: the deployment node (simulation mode) plays a
candidate on the simulator node, vlm_critic (kinematic backend) judges it, the simulator is reset between
candidates; and a search whose graph has no deployment node fails that playback with a reason, not the run.

Nothing here asks the random policy to walk (it may well fall: the fall fault then ends RUN).
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.parameter import Parameter  # noqa: E402

from deploy_fixtures import write_random_policy  # noqa: E402
from motionvl.critic.base import Rollout  # noqa: E402
from motionvl.search.config import PlaybackConfig  # noqa: E402
from motionvl.search.playback import CritiqueRequest, PlaybackResult  # noqa: E402
from render_fixtures import egl_works  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

TASK = "walk forward with straight knees"


def _params(**values):
    return [Parameter(k, value=v) for k, v in values.items()]


def _graph(context, spinners, *, deployment: bool = True, camera: bool = False, step_timeout_s: float = 15.0,
           seconds: float = 1.0, robot_yaml: str = ""):
    """simulator (hardware emulation, gantry), deployment (simulation mode), vlm_critic (kinematic), camera_renderer
    (with `camera`) and a host node carrying the GraphPlayback, every one on the robot of `robot_yaml` (empty: the
    package's); each node on its own executor thread as in `motionvl train`."""
    from motionvl.robot import load_robot_config
    from motionvl.ros.deployment_node import DeploymentNode
    from motionvl.ros.graph_playback import GraphPlayback
    from motionvl.ros.simulator_node import SimulatorNode
    from motionvl.ros.vlm_critic_node import VlmCriticNode

    spinners.add(SimulatorNode(context=context, parameter_overrides=_params(  # as the training graph
        mode="effort", emulate_hardware=True, gantry=True, publish_rate_hz=50.0, lockstep=True, hold_until_reset=True,
        robot_config=robot_yaml)))
    if deployment:
        # a shared test machine can stall a thread longer than a robot's drives may: lenient stale-state, overrun,
        # late-step and stalled-loop faults, as config/simulation_playback.yaml's and more (the faults themselves are
        # test_deployment_node's)
        spinners.add(DeploymentNode(context=context, parameter_overrides=_params(
            path="pd", allow_rearm=True, autostart="", stand_seconds=0.5, state_timeout=2.0, overrun_periods=100,
            policy_deadline_share=10.0, watchdog_periods=100, realtime_priority=0, robot_config=robot_yaml)))
    spinners.add(VlmCriticNode(context=context, parameter_overrides=_params(backend="kinematic",
                                                                            robot_config=robot_yaml)), threads=2)
    if camera:
        from motionvl.ros.camera_renderer_node import CameraRendererNode

        spinners.add(CameraRendererNode(context=context, parameter_overrides=_params(use_sim_time=True,
                                                                                     robot_config=robot_yaml)))
    host = spinners.add(rclpy.create_node(f"playback_host_{uuid.uuid4().hex[:6]}", context=context))
    return GraphPlayback(host, PlaybackConfig(seconds=seconds, render=False), load_robot_config(robot_yaml or None),
                         step_timeout_s=step_timeout_s, critic_timeout_s=120.0)


@pytest.fixture
def graph(tmp_path):
    context = rclpy.Context()
    rclpy.init(context=context)
    spinners = Spinners(context)
    try:
        yield _graph(context, spinners, camera=egl_works()), tmp_path
    finally:
        spinners.shutdown()
        rclpy.try_shutdown(context=context)


def test_candidates_are_played_by_the_deployment_node_and_judged_by_vlm_critic(graph):
    from motionvl.ros.graph_playback import GraphCritic

    playback, folder = graph
    policy = write_random_policy(folder / "policy.onnx")
    results = []
    render = egl_works()
    last_cycle = -1
    for cid in ("c1", "c2"):  # the second one starts from a reset simulator and a re-armed deployment node
        result = playback.play(cid, policy, folder / cid, render=render and cid == "c1", critique=CritiqueRequest(TASK))
        meta = result.meta
        # armed by design, whatever the machine's speed: on a state the deployment node took after the reset, at a
        # status without latched faults; every fault of the candidate was first seen after that status
        armed = meta["armed"]
        assert armed["state_stamp"] >= armed["reset_at_s"] and armed["imu_stamp"] >= armed["reset_at_s"], armed
        assert armed["armed_cycle"] > last_cycle, "armed after everything the candidate before did"
        assert all(f["cycle"] > armed["armed_cycle"] for f in meta["fault_log"]), (armed, meta["fault_log"])
        assert sorted(f["fault"] for f in meta["fault_log"]) == meta["faults"], "each fault counted once"
        last_cycle = max([armed["armed_cycle"]] + [f["cycle"] for f in meta["fault_log"]])
        assert meta["reached_run"], meta
        assert {"DAMP->PASSIVE", "PASSIVE->STAND", "STAND->RUN"} <= set(meta["transitions"]), meta["transitions"]
        assert meta["policy_steps"] > 0 and 0.0 <= result.clipped_share <= 1.0
        assert result.trajectory_path.exists() and len(result.trajectory().time) >= 2, "the rollout (a fall may end it)"
        assert result.fault is None or result.fault.startswith(("fault:", "fell")), result.fault
        assert result.feedback["valid"], result.feedback
        assert result.feedback["meta"]["rollout_id"] == meta["rollout_id"], "the feedback is for this rollout"
        assert result.feedback["task"] == TASK
        if render and cid == "c1":  # filmed by camera_renderer: the frames the critic sees, a video for the report
            assert len(result.frames()) >= 3 and result.video_path is not None and result.contact_sheet_path
            assert result.frame_times == sorted(result.frame_times) and result.frame_times[0] == 0.0
        saved = json.loads((folder / cid / "playback.json").read_text())
        assert PlaybackResult.from_summary(saved).feedback == result.feedback
        results.append(result)
    assert results[0].meta["rollout_id"] != results[1].meta["rollout_id"]
    # the second playback started where the reset put the robot, not where the first one ended
    starts = [np.asarray(r.trajectory().base_pos[0]) for r in results]
    assert np.linalg.norm(starts[0][:2] - starts[1][:2]) < 0.05, starts

    critic = GraphCritic(playback, "kinematic", folder / "judge")
    rollouts = [Rollout([], [], r.trajectory()) for r in results]
    comparison = critic.compare(rollouts[0], rollouts[1], TASK)
    assert comparison.valid, comparison
    assert comparison.meta["request_id"].startswith("compare@") and comparison.meta["backend"] == "kinematic"
    assert not (folder / "judge").exists() or not any((folder / "judge").iterdir()), "request files cleaned up"


def test_a_robot_whose_motors_are_not_its_joints_plays_back_judged_in_joint_space(tmp_path):
    """A robot config with a hardware section (motors in another order, signs and zero offsets): the simulator
    reports motor_states in motor space as the drives would and joint_states in joint space; the deployment node
    reads the motors and drives them with LowCommand in motor space (its JointCommand twin in joint space); the
    critic, the camera and the playback read joint_states: the rollout starts at the robot's default pose."""
    import threading

    from deploy_fixtures import hardware_section, write_robot_yaml
    from sensor_msgs.msg import JointState

    from motionvl.deploy.mapping import JointMapping
    from motionvl.msg import JointCommand, LowCommand
    from motionvl.robot import load_robot_config
    from motionvl.ros.messages import drive_command_from_msg

    robot_yaml = str(write_robot_yaml(tmp_path, hardware=hardware_section()))
    robot = load_robot_config(robot_yaml)
    m = JointMapping(robot)
    assert not m.identity and list(m.motor_names) != list(robot.joint_names)
    context = rclpy.Context()
    rclpy.init(context=context)
    spinners = Spinners(context)
    heard, lock = {"motor_states": [], "joint_states": [], "low_command": [], "joint_command": []}, threading.Lock()

    def keep(topic):
        def callback(msg):
            with lock:
                heard[topic].append(msg)
        return callback

    try:
        playback = _graph(context, spinners, camera=egl_works(), robot_yaml=robot_yaml)
        listener = spinners.add(rclpy.create_node(f"listener_{uuid.uuid4().hex[:6]}", context=context))
        for topic, kind in (("motor_states", JointState), ("joint_states", JointState), ("low_command", LowCommand),
                            ("joint_command", JointCommand)):
            listener.create_subscription(kind, topic, keep(topic), 1000)
        policy = write_random_policy(tmp_path / "policy.onnx", robot=robot)
        result = playback.play("c1", policy, tmp_path / "c1", render=egl_works(), critique=CritiqueRequest(TASK))
        sim = spinners.node("simulator").sim

        def drives_follow_the_last_low_command() -> bool:
            # the held simulator still takes the deployment node's (damping) commands: what the emulated drives
            # hold is the newest LowCommand mapped to joint space (order by the kd, sign and offset by the q)
            with lock:
                low = heard["low_command"][-1] if heard["low_command"] else None
            if low is None or sim.drive is None:
                return False
            c = drive_command_from_msg(low, m.motor_names)
            q, _, kp, kd, _ = sim.drive
            return (np.allclose(q, np.clip(m.from_motor_position(c["q"]), robot.lower, robot.upper), atol=1e-9)
                    and np.allclose(kp, m.from_motor_unsigned(c["kp"])) and np.allclose(kd, m.from_motor_unsigned(c["kd"])))
        assert wait_for(drives_follow_the_last_low_command, timeout=30.0)
    finally:
        spinners.shutdown()
        rclpy.try_shutdown(context=context)
    assert result.meta["reached_run"], result.meta
    assert result.feedback["valid"], result.feedback
    start = np.asarray(result.trajectory().joint_pos[0])
    assert np.abs(start - np.asarray(robot.default_pose)).max() < 0.2, (start, robot.default_pose)
    if egl_works():
        assert len(result.frames()) >= 3
    # each topic in its own space, under its own names
    assert heard["motor_states"] and all(list(s.name) == list(m.motor_names) for s in heard["motor_states"])
    assert heard["joint_states"] and all(list(s.name) == list(robot.joint_names) for s in heard["joint_states"])
    assert heard["low_command"] and all(list(c.motor_names) == list(m.motor_names) for c in heard["low_command"])
    assert len(heard["joint_command"]) >= len(heard["low_command"]) - 5
    assert all(list(c.joint_names) == list(robot.joint_names) for c in heard["joint_command"])
    # the same instant in both spaces: the motor report maps back onto the joint report
    joints = {(s.header.stamp.sec, s.header.stamp.nanosec): s for s in heard["joint_states"]}
    pairs = [(ms, joints[(ms.header.stamp.sec, ms.header.stamp.nanosec)]) for ms in heard["motor_states"]
             if (ms.header.stamp.sec, ms.header.stamp.nanosec) in joints]
    assert len(pairs) >= 10
    for ms, js in pairs:
        np.testing.assert_allclose(m.from_motor_position(ms.position), js.position, atol=1e-9)
        np.testing.assert_allclose(m.from_motor_signed(ms.velocity), js.velocity, atol=1e-9)
    # RUN's commands in joint space hold the policy's targets around the default pose at the configured gains
    running = [drive_command_from_msg(c, robot.joint_names) for c in heard["joint_command"]]
    assert any(np.allclose(c["kp"], robot.kp) for c in running), "no command at full gains (STAND end, RUN)"


def test_a_graph_without_a_deployment_node_fails_the_playback_with_a_reason_and_not_the_run(tmp_path):
    """A search (mode reference, a given start run) whose playback finds no deployment node: the start's
    playback fails naming the missing service, the search finishes and exports."""
    from motionvl.rl.trainer import train_policy
    from motionvl.search.ledger import Ledger
    from motionvl.search.loop import Search, SearchSettings
    from rl_fixtures import PlaceholderReward, tiny_config

    start = train_policy(tmp_path / "start", reward_spec=PlaceholderReward(), train_cfg=tiny_config(),
                         max_iterations=1, progress=False)
    context = rclpy.Context()
    rclpy.init(context=context)
    spinners = Spinners(context)
    try:
        playback = _graph(context, spinners, deployment=False, step_timeout_s=3.0)
        from motionvl.search.config import SearchConfig

        settings = SearchSettings(task=TASK, mode="reference", preset="quick", start_run=str(start.run_dir),
                                  config=SearchConfig.from_dict({"evaluation": {"episodes": 1, "seconds": 0.5},
                                                                 "playback": {"seconds": 0.5, "render": False}}).to_dict())
        summary = Search(tmp_path / "run", settings, playback=playback, slots=lambda: [], log=lambda m: None,
                         progress=False).run()
    finally:
        spinners.shutdown()
        rclpy.try_shutdown(context=context)
    assert summary["final"] == "start" and (tmp_path / "run" / "policy.onnx").exists()
    played = Ledger(tmp_path / "run").get("played", "start")
    assert played["fault"].startswith("playback failed: PlaybackError"), played
    assert "deployment/set_mode/damp" in played["fault"] and "is the node running" in played["fault"], played


def test_a_tiny_search_on_the_graph_plays_and_judges_every_candidate_there(tmp_path):
    """`motionvl train`'s graph with playback ros (one process): every playback ran on the deployment node and was
    judged by vlm_critic; the pairwise judgement of the candidate against r* came from the node too."""
    from pathlib import Path

    import yaml

    from motionvl.ros.graph_playback import GraphPlayback
    from motionvl.ros.train_graph import run_train_graph
    from motionvl.search.ledger import Ledger

    tiny = yaml.safe_load((Path(__file__).parent / "data" / "search_tiny.yaml").read_text())
    settings = tmp_path / "tiny.yaml"
    # a margin no score difference passes: the candidate always goes to the critic's pairwise judgement
    settings.write_text(yaml.safe_dump({**tiny, "candidates": 1, "final_iterations": 0, "ranking": {"margin": 100.0}}))
    run_dir = tmp_path / "run"
    code = run_train_graph({"run_dir": str(run_dir), "task": TASK, "settings_file": str(settings), "render": False,
                            "playback": "ros"}, trainers=1, trainers_in_process=True, record=True)
    assert code == 0
    ledger = Ledger(run_dir)
    assert ledger.get("run", "finished") is not None
    for cid in ("start", "i1k1"):
        played = ledger.get("played", cid)
        assert played["meta"]["playback"] == GraphPlayback.name and played["meta"]["reached_run"], played
        feedback = ledger.get("critiqued", cid)
        assert feedback == played["feedback"] and feedback["meta"]["rollout_id"] == played["meta"]["rollout_id"]
        assert feedback["valid"] and feedback["meta"]["backend"] == "kinematic", feedback
    compared = ledger.get("compared", "i1k1-vs-start")
    assert compared["challenger_first"]["valid"] and compared["best_first"]["valid"], compared
    # the critic's goals went as actions: the bag holds their progress and the typed boundaries
    from motionvl.bags import read_bag

    (bag,) = (run_dir / "bags").iterdir()
    seen: dict = {}
    for topic, _, _, msg in read_bag(bag):
        seen.setdefault(topic, []).append(msg)
    assert {"queued", "critiquing"} <= {m.feedback.stage for m in seen["/vlm_critic/critique/_action/feedback"]}
    assert "comparing" in {m.feedback.stage for m in seen["/vlm_critic/compare/_action/feedback"]}
    assert [b.event for b in seen["/rollout/boundary"]].count(1) == 2  # START of each candidate's rollout
    # and what the deployment node sent the drives, with the mode it was in
    assert "RUN" in {m.mode_name for m in seen["/deployment/status"]}
    assert len(seen["/low_command"]) > 50 and len(seen["/joint_command"]) == len(seen["/low_command"])
