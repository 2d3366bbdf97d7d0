"""The vlm_critic node's core without ROS: collecting a rollout between boundaries, comparisons. (The boundary
and goal messages and what they refuse: tests/test_bad_messages.py.)"""

import numpy as np
import pytest

from motionvl.critic.base import Rollout
from motionvl.critic.rollouts import Boundary, CollectLimits, RolloutCollector
from motionvl.backend_names import ModelSettings
from motionvl.critic.service import ComparisonRequest, CriticService, backend_factory
from motionvl.robot import load_robot_config
from motionvl.sim.model import build_model


def test_collector_keeps_one_frame_per_interval_and_the_end_wins():
    collector = RolloutCollector(CollectLimits(frame_interval_s=0.1, max_frames=3))
    collector.add_joint_state(0.0, [0.0])  # before any start: not the rollout's
    collector.start(Boundary("start", "walk", "1"))
    decoded = []
    for k in range(10):  # 20 Hz frames: every other one kept, then the cap
        collector.add_frame(5.0 + 0.05 * k, lambda k=k: decoded.append(k) or np.full((2, 2, 3), k, np.uint8))
        collector.add_joint_state(5.0 + 0.05 * k, [0.1 * k])
    assert collector.status() == {"collecting": True, "task": "walk", "frames": 3, "states": 10, "odom": 0}
    assert decoded == [0, 2, 4]  # frames not kept are never decoded
    done, started = collector.end(Boundary("end", "run", command=(0.5, 0.0, 0.0)))
    assert started and done.task == "run" and done.rollout_id == "1" and done.command == (0.5, 0.0, 0.0)
    assert done.frame_times == [5.0, 5.1, 5.2] and done.dropped_frames == 4  # every frame after the cap
    assert collector.snapshot().frame_times == done.frame_times and not collector.status()["collecting"]
    nothing, started = collector.end(Boundary("end"))
    assert not started and nothing.counts() == {"frames": 0, "states": 0, "odom": 0}


def test_service_answers_every_comparison_even_when_it_cannot_judge(tmp_path):
    robot = load_robot_config()
    service = CriticService(backend_factory("kinematic"), model=build_model(robot), robot=robot, default_task="walk")
    Rollout([np.zeros((4, 4, 3), np.uint8)], [0.0]).save(tmp_path / "frames_only")
    request = ComparisonRequest(7, "", {"path": str(tmp_path / "frames_only")}, {"path": str(tmp_path / "none")})
    answer = service.compare(request)
    assert not answer.valid and answer.meta["request_id"] == 7 and "second rollout: cannot load" in answer.error
    request = ComparisonRequest(None, "", {"path": str(tmp_path / "frames_only")}, {"path": str(tmp_path / "frames_only")})
    answer = service.compare(request)
    assert not answer.valid and "first rollout: the kinematic critic needs the rollout's trajectory" in answer.error
    def no_backend():
        raise RuntimeError("no GPU")

    answer = CriticService(no_backend, model=None, robot=robot).compare(request)
    assert not answer.valid and "cannot create the critic: RuntimeError: no GPU" in answer.error
    with pytest.raises(ValueError, match="backend 'openai' needs base_url$"):
        backend_factory("openai", ModelSettings(model="m"))
