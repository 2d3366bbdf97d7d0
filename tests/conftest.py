"""Session set-up for every test: ROS traffic stays on this machine and in this run's domain,
rendering is headless, nothing is fetched from a model hub.

These are set before any test module imports rclpy (ROS reads them at init). `make test`
sets the same variables; running pytest directly gets them here.
"""

from __future__ import annotations

import gc
import os

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(os.getpid() % 100 + 1))  # per run; 1..100
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402


def _rclpy_context():
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        yield context
    finally:
        rclpy.try_shutdown(context=context)
        # what the test left in reference cycles (a node and the actions holding its handle) goes now, with the
        # test's threads stopped, not in a later test's garbage collection on a thread that holds the GIL
        gc.collect()


@pytest.fixture
def ros_context():
    """An initialised rclpy Context of the test's own, shut down afterwards.

    Create nodes with `context=ros_context` and executors with `context=ros_context`, so
    tests never share or leak the global default context.
    """
    yield from _rclpy_context()


@pytest.fixture
def second_ros_context():
    """Another context (a DDS participant of its own): one participant cannot publish two types on a topic."""
    yield from _rclpy_context()


@pytest.fixture(scope="session")
def robot():
    """The shipped robot config (config/robot.yaml)."""
    from motionvl.robot import load_robot_config

    return load_robot_config()


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, robot):
    """(run_dir, TrainResult, history records) of a tiny two-iteration training run, shared by the tests that
    only read it (copy it before changing it)."""
    from motionvl.rl.trainer import train_policy
    from rl_fixtures import PlaceholderReward, tiny_config

    run_dir = tmp_path_factory.mktemp("run")
    seen = []
    result = train_policy(run_dir, PlaceholderReward(), tiny_config(), max_iterations=2, progress=False,
                          on_iteration=seen.append, robot=robot)
    return run_dir, result, seen
