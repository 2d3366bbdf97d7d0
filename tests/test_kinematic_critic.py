"""The kinematic critic on trajectories of known geometry: stances, a synthetic walk, a fall."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from motionvl.critic.kinematic import KinematicCritic, analyse_gait, debounce, parse_task
from motionvl.critic.schema import Descriptor, MotionFeedback, merge_measurements
from motionvl.render.rollout import PoseKinematics, trajectory_from_poses
from motionvl.robot import load_robot_config
from motionvl.sim.model import SOLE_HALF_SIZE, build_model
from motionvl.sim.trajectory import Trajectory

ROBOT = load_robot_config()
J = {n: i for i, n in enumerate(ROBOT.joint_names)}
CRITIC = KinematicCritic()


@pytest.fixture(scope="module")
def model():
    return build_model(ROBOT)


def leg_pose(knee: float) -> np.ndarray:
    """Joint positions with both knees at `knee` rad and the feet flat (hip = ankle = -knee / 2)."""
    q = ROBOT.default_pose.copy()
    for side in ("left", "right"):
        q[J[f"{side}_knee"]] = knee
        q[J[f"{side}_hip_pitch"]] = -knee / 2
        q[J[f"{side}_ankle_pitch"]] = -knee / 2
    return q


def stance_trajectory(model, knee: float, seconds: float = 2.0, dt: float = 0.02, speed: float = 0.0,
                      yaw: float = 0.0, fall_at: float | None = None, command=(0.0, 0.0, 0.0)) -> Trajectory:
    """A rigid stance with soles 2 mm into the floor, the base moving at `speed` along its heading;
    with `fall_at` the body drops and pitches over from that time on."""
    joints = leg_pose(knee)
    kin = PoseKinematics(model, ROBOT)
    quat = np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
    feet, _ = kin.feet(kin.qpos([0.0, 0.0, 1.0], quat, joints))
    base_z = 1.0 - (feet[:, 2].min() - SOLE_HALF_SIZE[2]) - 0.002
    n = int(round(seconds / dt)) + 1
    t = np.arange(n) * dt
    pos = np.stack([speed * t * math.cos(yaw), speed * t * math.sin(yaw), np.full(n, base_z)], 1)
    quats = np.tile(quat, (n, 1))
    if fall_at is not None:
        down = t >= fall_at
        k = np.clip((t - fall_at) / 0.5, 0, 1)[down]
        pos[down, 2] = base_z - 0.6 * k
        pitch = 1.4 * k
        quats[down] = np.stack([np.cos(pitch / 2), 0 * k, np.sin(pitch / 2), 0 * k], 1)
    return trajectory_from_poses(model, ROBOT, t, pos, quats, np.tile(joints, (n, 1)), command=command)


def walking_trajectory(speed: float = 0.6, period: float = 1.0, seconds: float = 6.0, dt: float = 0.02,
                       clearance=(0.08, 0.08), stance_frac: float = 0.6, knee_stance: float = 0.1,
                       knee_swing: float = 1.0) -> Trajectory:
    """An ideal alternating gait: cadence 2 / period steps/s, step length speed x period / 2, soles
    fixed in stance (no slip), lifted by `clearance` (left, right) in swing."""
    n = int(round(seconds / dt)) + 1
    t = np.arange(n) * dt
    qpos = np.zeros((n, 7 + ROBOT.num_joints))
    qpos[:, 0] = speed * t
    qpos[:, 2] = 0.8
    qpos[:, 3] = 1.0
    qpos[:, 7:] = ROBOT.default_pose
    foot = np.zeros((n, 2, 3))
    contact = np.zeros((n, 2), bool)
    for k, (offset, y) in enumerate(((0.0, 0.09), (0.5, -0.09))):
        cyc = t / period - offset
        c, phase = np.floor(cyc), cyc - np.floor(cyc)
        x_stance = speed * ((c + offset) * period + stance_frac * period / 2)
        s = np.clip((phase - stance_frac) / (1 - stance_frac), 0, 1)
        swing = phase >= stance_frac
        foot[:, k, 0] = x_stance + s * speed * period
        foot[:, k, 1] = y
        foot[:, k, 2] = 0.015 + clearance[k] * np.sin(np.pi * s) * swing
        contact[:, k] = ~swing
        qpos[:, 7 + J[("left", "right")[k] + "_knee"]] = knee_stance + (knee_swing - knee_stance) * np.sin(np.pi * s) * swing
    vel = np.gradient(foot, t, axis=0)
    qvel = np.zeros((n, 6 + ROBOT.num_joints))
    qvel[:, 0] = speed
    return Trajectory(dt=dt, joint_names=ROBOT.joint_names, time=t, qpos=qpos, qvel=qvel, foot_pos=foot,
                      foot_vel=vel, foot_contact=contact, command=np.tile([speed, 0.0, 0.0], (n, 1)),
                      fell=np.zeros(n, bool))


def descriptor(fb: MotionFeedback, label: str) -> Descriptor:
    return next(d for d in fb.descriptors if d.label == label)


# ----------------------------------------------------------------------------- measurements

def test_straight_knee_stance_reads_near_zero_flexion(model):
    fb = CRITIC.critique(stance_trajectory(model, knee=0.02), "stand still with straight knees")
    assert fb.valid and fb.critic == "kinematic"
    for label in ("knee_flexion", "knee_flexion_left", "knee_flexion_right"):
        assert descriptor(fb, label).value == pytest.approx(math.degrees(0.02), abs=0.5)
    assert ("knees_straight", pytest.approx(0.9)) in fb.features
    assert descriptor(fb, "torso_pitch").value == pytest.approx(0.0, abs=0.1)
    assert descriptor(fb, "stance_width").value == pytest.approx(0.18, abs=0.01)
    assert descriptor(fb, "forward_speed").value == pytest.approx(0.0, abs=1e-6)


def test_default_pose_reads_its_knee_angle(model):
    traj = stance_trajectory(model, knee=ROBOT.default_pose[J["left_knee"]])
    assert traj.foot_contact.all()  # the geometry puts both soles on the floor
    a = analyse_gait(traj)
    assert a.get("knee_flexion") == pytest.approx(math.degrees(0.4), abs=0.5)  # ~23 deg
    assert a.get("base_height") == pytest.approx(traj.base_pos[0, 2] - 0.013, abs=0.005)
    feats = dict(CRITIC.critique(traj, "stand").features)
    assert "knees_straight" not in feats and "knees_bent" not in feats  # between the schema's bands


def test_base_moving_at_half_a_metre_per_second_reads_it(model):
    for yaw in (0.0, 1.2):  # along its own heading, whatever the heading is
        fb = CRITIC.critique(stance_trajectory(model, knee=0.4, seconds=4.0, speed=0.5, yaw=yaw), "walk")
        assert descriptor(fb, "forward_speed").value == pytest.approx(0.5, abs=0.01)
        assert descriptor(fb, "lateral_speed").value == pytest.approx(0.0, abs=0.01)
        assert "walking_forward" in dict(fb.features)
        # sliding on rigid legs is not walking: stance feet slide, no steps
        assert descriptor(fb, "foot_slip").value == pytest.approx(0.5, abs=0.02)
        assert {"feet_sliding", "feet_dragging"} <= set(dict(fb.features))


def test_fallen_trajectory_reads_fell(model):
    traj = stance_trajectory(model, knee=0.4, seconds=3.0, fall_at=1.0)
    assert traj.fell.any()
    fb = CRITIC.critique(traj, "stand still")
    assert descriptor(fb, "fell").value == 1.0 and "fell" in dict(fb.features)
    assert fb.meta["analysis"]["fall_time_s"] == pytest.approx(1.2, abs=0.25)
    upright = CRITIC.critique(stance_trajectory(model, knee=0.4, seconds=3.0), "stand still")
    assert "fell" not in dict(upright.features) and all(d.label != "fell" for d in upright.descriptors)
    assert fb.alignment_score < 0.3 * upright.alignment_score
    assert {"orientation", "termination"} <= {s.term for s in fb.suggestions}


def test_synthetic_walk_gait_numbers():
    a = analyse_gait(walking_trajectory(speed=0.6, period=1.0))
    assert a.get("cadence") == pytest.approx(120.0, rel=0.03)
    assert a.get("step_length") == pytest.approx(0.3, abs=0.02)
    assert a.get("foot_clearance") == pytest.approx(0.08, abs=0.005)
    assert a.get("foot_slip") == pytest.approx(0.0, abs=0.01)
    assert a.get("forward_speed") == pytest.approx(0.6, abs=0.01)
    assert a.get("knee_flexion") == pytest.approx(math.degrees(0.1), abs=0.5)
    assert a.get("swing_knee_flexion") == pytest.approx(math.degrees(1.0), abs=1.0)
    assert a.get("gait_asymmetry") < 0.05 and a.get("flight_fraction") == 0.0
    lopsided = analyse_gait(walking_trajectory(clearance=(0.10, 0.02)))
    assert lopsided.get("gait_asymmetry") > 0.1


def test_contact_blips_are_debounced():
    m = np.array([1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1], bool)
    assert debounce(m, 2).tolist() == [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1]


# ----------------------------------------------------------------------------- the task

def test_alignment_is_higher_for_the_matching_task(model):
    stand = stance_trajectory(model, knee=0.4, seconds=3.0)
    walk = walking_trajectory(speed=0.6)
    s = lambda traj, task: CRITIC.critique(traj, task).alignment_score  # noqa: E731
    assert s(stand, "stand still") > 0.9 > 0.1 > s(stand, "walk forward at 0.6 m/s")
    assert s(walk, "walk forward at 0.6 m/s") > 0.9
    assert s(walk, "walk forward at 0.6 m/s") > s(walk, "stand still")
    assert s(walk, "walk forward at 0.6 m/s") > s(walk, "walk backward at 0.6 m/s")
    assert s(walk, "walk forward at 0.6 m/s") > s(walk, "walk forward at 1.2 m/s")
    assert s(walk, "walk forward with high steps") > s(walking_trajectory(clearance=(0.01, 0.01)),
                                                        "walk forward with high steps")
    straight = stance_trajectory(model, knee=0.02, seconds=3.0)
    assert s(straight, "stand still with straight knees") > s(stand, "stand still with straight knees")
    bent = stance_trajectory(model, knee=1.0, seconds=3.0)
    assert s(bent, "stand with bent knees") > s(straight, "stand with bent knees")


def test_unjudged_lists_what_the_rules_do_not_understand(model):
    walk = walking_trajectory(speed=0.6)
    plain = CRITIC.critique(walk, "walk forward at 0.6 m/s")
    extra = CRITIC.critique(walk, "Walk forward at 0.6 m/s while waving the left arm gracefully")
    assert plain.unjudged == []
    assert extra.unjudged == ["waving the left arm gracefully"]
    assert extra.alignment_score == plain.alignment_score
    nothing = CRITIC.critique(walk, "recite a poem")
    assert nothing.valid and nothing.unjudged == ["recite a poem"] and nothing.alignment_score == 0.0
    # symmetry cannot be judged without steps
    stand = CRITIC.critique(stance_trajectory(model, knee=0.4), "stand still with a symmetric gait")
    assert any("symmetry" in u for u in stand.unjudged)


@pytest.mark.parametrize("task, expected", [
    ("walk forward with straight knees at 0.6 m/s", dict(gait="walk", direction="forward", speed=0.6, knees="straight")),
    ("turn left in place", dict(gait="turn", turn="left", in_place=True)),
    ("stand upright", dict(gait="stand", torso="upright")),
    ("run fast", dict(gait="run", speed_word="fast")),
    ("march in place with high knees", dict(gait="step", steps=["high"])),
    ("sidestep to the right at 20 cm/s", dict(direction="right", speed=pytest.approx(0.2))),
    ("walk backward slowly without falling", dict(direction="backward", speed_word="slow", stable=True)),
])
def test_task_rules(task, expected):
    spec = parse_task(task)
    for key, value in expected.items():
        assert getattr(spec, key) == value, (key, spec)
    assert spec.unjudged == []


def test_suggestions_name_reward_library_terms(model):
    from motionvl.rewards.terms import REGISTRY

    fb = CRITIC.critique(stance_trajectory(model, knee=0.4, seconds=3.0),
                         "walk forward with straight knees and high steps at 0.6 m/s")
    terms = {(s.term, s.direction) for s in fb.suggestions}
    assert {("tracking_lin_vel", "increase"), ("knee_extension", "increase"), ("feet_clearance", "increase")} <= terms
    assert all(s.term in REGISTRY for s in fb.suggestions)
    assert all(s.reason for s in fb.suggestions)


# ----------------------------------------------------------------------------- protocol and integration

def test_critic_protocol_call_and_registry(model):
    from motionvl.critic.base import create_critic

    critic = create_critic("kinematic")
    assert isinstance(critic, KinematicCritic) and critic.name == "kinematic"
    traj = stance_trajectory(model, knee=0.4)
    fb = critic.critique([np.zeros((4, 4, 3), np.uint8)], [0.0], "stand still", trajectory=traj)
    assert fb.valid and fb.alignment_score > 0.9 and fb.meta["not_a_vlm"] is True
    missing = critic.critique([], [], "stand still")
    assert not missing.valid and "trajectory" in missing.error
    assert MotionFeedback.from_json(fb.to_json()) == fb


def test_better_than_best(model):
    stand = stance_trajectory(model, knee=0.4, seconds=3.0)
    good = CRITIC.critique(stand, "stand still")
    worse = CRITIC.critique(stance_trajectory(model, knee=0.4, seconds=3.0, speed=0.3), "stand still",
                            previous_best=good)
    assert good.better_than_best is None and worse.better_than_best is False
    assert CRITIC.critique(stand, "stand still", previous_best=0.2).better_than_best is True
    assert CRITIC.critique(stand, "stand still", previous_best=worse.to_json()).better_than_best is True


def test_measurements_flag_a_contradicting_vlm(model):
    bent = stance_trajectory(model, knee=0.8)
    measured = CRITIC.measure(bent)
    assert measured["knee_flexion"] == pytest.approx(math.degrees(0.8), abs=0.5)
    vlm = MotionFeedback(critic="openai:test", task="walk", descriptors=[
        Descriptor("knees_straight", "knees", None, None, 0.9, "looks straight"),
        Descriptor("knee_flexion", "knees", 5.0, "deg", 0.8, ""),
        Descriptor("torso_upright", "torso", None, None, 0.9, "")], alignment_score=0.5)
    merged = merge_measurements(vlm, measured)
    flags = {d.label: d.contradiction for d in merged.descriptors}
    assert flags == {"knees_straight": True, "knee_flexion": True, "torso_upright": False}


def test_critique_cli_prints_feedback_json(capsys):
    from motionvl.cli import main

    rc = main(["critique", "--policy", "stand", "--seconds", "2", "--task", "stand still with an upright torso"])
    out = capsys.readouterr().out.strip().splitlines()[-1]
    fb = MotionFeedback.from_json(out)
    assert rc == 0 and fb.valid and fb.critic == "kinematic" and fb.alignment_score > 0.8
    assert json.loads(out)["meta"]["policy"] == "stand"


def test_critique_cli_vlm_endpoint_is_cross_checked_by_kinematics(capsys):
    """`--critic openai` against a loopback server: frames are sent, the answer is merged with the
    kinematic measurements (the 'VLM' claims 5 deg knees; the PD stand has ~26 deg)."""
    import http.server
    import threading

    from motionvl.cli import main

    answer = {"descriptors": [{"label": "knee_flexion", "region": "knees", "value": 5, "unit": "deg",
                               "confidence": 0.8, "note": "straight"},
                              {"label": "torso_upright", "region": "torso", "confidence": 0.9}],
              "alignment_score": 0.9, "suggestions": [], "better_than_best": None, "unjudged": []}
    requests = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            out = json.dumps({"choices": [{"message": {"role": "assistant", "content": json.dumps(answer)},
                                           "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        rc = main(["critique", "--policy", "stand", "--seconds", "1", "--width", "64", "--height", "48",
                   "--task", "stand still", "--critic", "openai", "--model", "test-vlm",
                   "--base-url", f"http://127.0.0.1:{server.server_port}/v1"])
    finally:
        server.shutdown()
        server.server_close()
    fb = MotionFeedback.from_json(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and fb.valid and fb.critic == "openai:test-vlm"
    images = [p for m in requests[0]["messages"] if isinstance(m["content"], list)
              for p in m["content"] if p.get("type") == "image_url"]
    assert len(images) == 11  # 1 s every 0.1 s
    knee = descriptor(fb, "knee_flexion")
    assert knee.contradiction and knee.measured_value == pytest.approx(26.0, abs=2.0)
    assert not descriptor(fb, "torso_upright").contradiction
    assert fb.meta["contradictions"] == ["knee_flexion"]
