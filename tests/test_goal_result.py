"""motionvl.ros.goals.goal_result, the one-shot action call of the orchestrator (Synthesize) and ROS playback
(Critique, Compare), against a real rclpy action server over DDS: an answer comes back with its status, a refused
goal raises, and a goal past its timeout raises after it was cancelled at the server."""

from __future__ import annotations

import threading
import time

import pytest
from action_msgs.msg import GoalStatus
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node

from motionvl.action import Synthesize
from motionvl.ros.goals import ActionClient, destroy_actions, goal_result
from spinning import stop_spinning


@pytest.fixture
def graph(ros_context):
    """(client, cancels): an ActionClient on a server that answers "fast" at once, refuses "refuse" and holds
    "slow" until it is cancelled (each cancel request the server saw is recorded)."""
    server_node = Node("goal_result_server", context=ros_context)
    client_node = Node("goal_result_client", context=ros_context)
    cancels: list = []

    def execute(handle):
        if handle.request.request_json == "slow":
            while not handle.is_cancel_requested:
                time.sleep(0.01)
            handle.canceled()
            return Synthesize.Result(error="cancelled", record_version=1)
        handle.succeed()
        return Synthesize.Result(record_json='{"ok": true}', record_version=1)

    def on_cancel(handle):
        cancels.append(handle.request.request_json)
        return CancelResponse.ACCEPT

    group = ReentrantCallbackGroup()
    ActionServer(server_node, Synthesize, "goal_result_test", execute, callback_group=group,
                 goal_callback=lambda goal: GoalResponse.REJECT if goal.request_json == "refuse" else GoalResponse.ACCEPT,
                 cancel_callback=on_cancel)
    client = ActionClient(client_node, Synthesize, "goal_result_test", callback_group=group)
    executor = MultiThreadedExecutor(num_threads=4, context=ros_context)
    executor.add_node(server_node)
    executor.add_node(client_node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    assert client.wait_for_server(timeout_sec=10)
    try:
        yield client, cancels
    finally:
        stop_spinning([(executor, spinner)], [server_node, client_node], also=destroy_actions)


def test_an_answer_a_refusal_and_a_timeout_that_cancels(graph):
    client, cancels = graph
    status, result = goal_result(client, Synthesize.Goal(request_json="fast", request_version=1), 10.0, "the server")
    assert status == GoalStatus.STATUS_SUCCEEDED and result.record_json == '{"ok": true}'
    with pytest.raises(RuntimeError, match="the server did not accept the goal"):
        goal_result(client, Synthesize.Goal(request_json="refuse", request_version=1), 10.0, "the server")
    with pytest.raises(TimeoutError, match="the server did not answer within 1 s"):
        goal_result(client, Synthesize.Goal(request_json="slow", request_version=1), 1.0, "the server")
    end = time.monotonic() + 10.0
    while "slow" not in cancels and time.monotonic() < end:
        time.sleep(0.02)
    assert cancels == ["slow"], "the goal past its timeout was cancelled at the server"


def test_the_nodes_actions_go_with_the_node(ros_context, tmp_path):
    """destroy_node of each node serving or calling actions destroys its action servers and clients (rclpy's own
    leaves them to a later garbage collection, which tears their DDS entities down on whatever thread runs it)."""
    from rclpy.parameter import Parameter

    from motionvl.ros.policy_trainer_node import PolicyTrainerNode
    from motionvl.ros.reward_synthesizer_node import RewardSynthesizerNode
    from motionvl.ros.vlm_critic_node import VlmCriticNode

    caller = Node("actions_caller", context=ros_context)  # the orchestrator's and playback's clients: destroy_actions
    ActionClient(caller, Synthesize, "synthesize")
    nodes = [RewardSynthesizerNode(context=ros_context),
             VlmCriticNode(context=ros_context, parameter_overrides=[Parameter("backend", value="kinematic")]),
             PolicyTrainerNode(context=ros_context, parameter_overrides=[
                 Parameter("runs_dir", value=str(tmp_path / "runs"))])]

    def actions(node):
        return [w for w in node.waitables if isinstance(w, (ActionClient, ActionServer))]

    assert all(actions(node) for node in nodes + [caller])
    for node in nodes:
        node.destroy_node()
        assert not actions(node), f"{node.get_name()} left {actions(node)}"
    destroy_actions(caller)
    assert not actions(caller)
    caller.destroy_node()


def test_an_action_client_is_whole_when_a_spinning_executor_first_looks_at_it(ros_context):
    """The orchestrator makes a trainer's client when it first hears the trainer, while its executor spins on
    another thread. Adding the client to the node wakes that executor, whose first look counts the client's
    entities under the client's lock: at that moment the client must already be usable (rclpy's own client
    creates its lock after it was added, and the executor thread raised AttributeError)."""
    node = Node("goal_result_early_look", context=ros_context)
    looks: list = []
    add_waitable = node.add_waitable

    def add_then_look(waitable) -> None:  # what the woken executor thread does, at the worst moment
        add_waitable(waitable)
        looks.append((waitable.get_num_entities(), waitable._lock))

    node.add_waitable = add_then_look
    client = ActionClient(node, Synthesize, "goal_result_early_look")
    [(entities, lock_seen)] = looks
    assert entities.num_subscriptions == 2  # feedback and status
    assert client._lock is lock_seen  # one lock for the client's life: the executor may hold the first one
    client.destroy()
    node.destroy_node()


def test_a_goal_answered_at_once_completes_the_future_the_caller_holds(graph):
    """rclpy 9.1's send_goal_async registers a second future after it released its lock: a goal response the
    executor takes in that moment completed a future nobody held, and the caller's never completed. The moment is
    widened here to 0.5 s (the feedback callback is registered in it), so the spinning executor has the answer."""
    client, _ = graph

    class SlowToRegister(dict):
        def __setitem__(self, key, value):
            time.sleep(0.5)
            super().__setitem__(key, value)

    client._feedback_callbacks = SlowToRegister()
    future = client.send_goal_async(Synthesize.Goal(request_json="fast", request_version=1),
                                    feedback_callback=lambda msg: None)
    end = time.monotonic() + 10.0
    while not future.done() and time.monotonic() < end:
        time.sleep(0.01)
    assert future.done() and future.result().accepted, "the caller's future never completed"
    assert future not in client._futures and not client._pending_goal_requests, "nothing left registered"
    status, result = goal_result(client, Synthesize.Goal(request_json="fast", request_version=1), 10.0, "the server")
    assert status == GoalStatus.STATUS_SUCCEEDED
