"""Held-out selection of the exported policy over the last stretch of a run (motionvl.rl.selection)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from motionvl.rl.config import TrainConfig
from motionvl.rl.evaluate import evaluate
from motionvl.rl.export import load_policy
from motionvl.rl.trainer import train_policy
from motionvl.robot import ConfigError
from rl_fixtures import PlaceholderReward, tiny_config


def test_selection_exports_the_best_validated_candidate_within_the_budget(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig

    cfg = tiny_config()
    cfg.minutes = 0.4
    cfg.selection = SelectionConfig(minutes=1.0, every=2, episodes=2, seconds=0.5, seed=11)  # stretch: 1/4 of 24 s
    run_dir = tmp_path / "sel"
    result = train_policy(run_dir, PlaceholderReward(), cfg, progress=False, robot=robot)
    record = json.loads((run_dir / "selection.json").read_text())
    candidates = record["candidates"]
    # how many fit in the 6 s stretch depends on the machine's speed (the iteration budget's test
    # below counts them exactly); the run's last policy and its last iterate are candidates too
    budget = cfg.minutes * 60
    final = [c for c in candidates if c.get("final_of_budget_s") == budget]
    assert {c["actor"] for c in final} == {"exported", "last_iterate"}
    assert all(c["iteration"] == result.iterations for c in final)
    grid = [c for c in candidates if c not in final]
    assert all(c["iteration"] % 2 == 0 and budget - 6.0 - 1e-6 <= c["elapsed_s"] <= budget for c in grid)
    best = max(candidates, key=lambda c: (c["success_rate"], c["task_score"], c["iteration"], c["actor"] == "exported"))
    assert record["chosen_iteration"] == best["iteration"] == result.selected_iteration
    assert record["chosen_actor"] == best["actor"] == result.selected_actor
    assert (run_dir / "policy.onnx").read_bytes() == (run_dir / best["onnx"]).read_bytes()
    assert (run_dir / "policy_final.onnx").is_file()
    # the recorded scores are the evaluation's: the same episodes give the same numbers again
    again = evaluate(run_dir / best["onnx"], seconds=0.5, episodes=2, randomize=True, command=cfg.selection.command, seed=11,
                     robot=robot, robot_dt=False)  # validated at the training physics (selection.training_physics)
    assert again["task_score"] == best["task_score"] and again["success_rate"] == best["success_rate"]


def test_selection_chooses_within_the_final_stretch_of_the_budget(tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    sel = PolicySelection(SelectionConfig(minutes=1.0, every=10), tmp_path)
    assert not sel.due(10, elapsed_s=500.0, budget_s=600.0), "before the stretch"
    assert sel.due(550, elapsed_s=550.0, budget_s=600.0) and not sel.due(555, elapsed_s=550.0, budget_s=600.0)
    assert not sel.due(590, elapsed_s=590.0, budget_s=600.0, validation_s=15.0), "no time left to validate"
    sel.candidates = [
        {"iteration": 740, "elapsed_s": 560.0, "success_rate": 0.9, "task_score": 0.9},  # a 10-minute run's stretch
        {"iteration": 1500, "elapsed_s": 1150.0, "success_rate": 0.7, "task_score": 0.8},  # resumed to 20 minutes
        {"iteration": 1510, "elapsed_s": 1160.0, "success_rate": 0.7, "task_score": 0.85},
        {"iteration": 1520, "elapsed_s": 1170.0, "success_rate": 0.6, "task_score": 0.99}]
    assert sel.best(600.0)["iteration"] == 740
    assert sel.best(1200.0)["iteration"] == 1510, "earlier budgets' candidates do not compete; ties go to task score"
    assert sel.best(3600.0) is None
    assert sel.stretch_s(600.0) == 60.0 and sel.stretch_s(120.0) == 30.0, "at most a quarter of a short budget"
    # a resumed run keeps its candidates while the validation episodes stay the same, and only then
    sel._write()
    assert len(PolicySelection(SelectionConfig(minutes=2.0, every=20), tmp_path).candidates) == 4
    with pytest.warns(UserWarning, match="other episodes"):
        other = PolicySelection(SelectionConfig(minutes=1.0, every=10, seed=1), tmp_path)
    assert other.candidates == [] and other.best(600.0) is None


def test_selection_over_an_iteration_budget_counts_iterations_not_seconds(tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    sel = PolicySelection(SelectionConfig(minutes=0.0, iterations=60, every=10), tmp_path)
    assert sel.stretch_iterations(3600) == 60 and sel.stretch_iterations(120) == 30 and sel.stretch_iterations(None) == 0
    due = [i for i in range(0, 3700, 5) if sel.due(i, elapsed_s=1.0, budget_s=1e9, max_iterations=3600)]
    assert due == [3550, 3560, 3570, 3580, 3590, 3600], "the last 60 iterations, whatever the clock says"
    assert not any(sel.due(i, elapsed_s=1.0, budget_s=1e9) for i in range(0, 3700, 10)), "no iteration budget"
    sel.candidates = [{"iteration": i, "elapsed_s": 0.0, "success_rate": 0.9, "task_score": s}
                      for i, s in ((600, 0.99), (3550, 0.5), (3590, 0.8), (3600, 0.7))]
    assert sel.best(1e9, max_iterations=3600)["iteration"] == 3590, "earlier budgets' candidates do not compete"
    assert sel.best(1e9, max_iterations=600)["iteration"] == 600
    assert sel.best(1e9, max_iterations=3000) is None
    for bad in (True, -1, 1.5):
        with pytest.raises(ConfigError, match="iterations"):
            TrainConfig.from_dict({"selection": {"iterations": bad}})


def test_an_iteration_budget_validates_its_last_iterations_and_repeats_exactly(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig

    cfg = tiny_config()
    cfg.save_interval = 50
    cfg.selection = SelectionConfig(minutes=0.0, iterations=4, every=2, episodes=2, seconds=0.5, seed=11,
                                    final_candidates=False)  # the grid alone (the final ones: the test below)
    runs = [train_policy(tmp_path / name, PlaceholderReward(), cfg, max_iterations=12, progress=False, robot=robot)
            for name in ("a", "b")]
    records = [json.loads((r.run_dir / "selection.json").read_text()) for r in runs]
    # the stretch is min(4, a quarter of 12) = 3 iterations: 10 and 12 are on the grid
    assert [c["iteration"] for c in records[0]["candidates"]] == [10, 12]
    best = max(records[0]["candidates"], key=lambda c: (c["success_rate"], c["task_score"], c["iteration"]))
    assert records[0]["chosen_iteration"] == best["iteration"] == runs[0].selected_iteration
    assert (runs[0].run_dir / "policy.onnx").read_bytes() == (runs[0].run_dir / best["onnx"]).read_bytes()
    strip = lambda rec: [{k: v for k, v in c.items() if k != "elapsed_s"} for c in rec["candidates"]]  # noqa: E731
    assert strip(records[1]) == strip(records[0]), "a second run of the same budget validates the same candidates"
    assert records[1]["chosen_iteration"] == records[0]["chosen_iteration"]
    # resumed to a larger budget, the run chooses among the new stretch's candidates only
    more = train_policy(runs[0].run_dir, PlaceholderReward(), None, resume=True, max_iterations=16, progress=False,
                        robot=robot)
    record = json.loads((runs[0].run_dir / "selection.json").read_text())
    assert [c["iteration"] for c in record["candidates"]] == [10, 12, 14, 16]
    assert more.selected_iteration in (14, 16) and record["chosen_iteration"] == more.selected_iteration


def test_selection_at_the_training_physics_validates_there_and_keeps_its_episodes_apart(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    cfg = tiny_config()
    cfg.save_interval = 50
    cfg.selection = SelectionConfig(minutes=0.0, iterations=2, every=2, episodes=2, seconds=0.5, seed=11,
                                    final_candidates=False, training_physics=True)
    result = train_policy(tmp_path / "run", PlaceholderReward(), cfg, max_iterations=8, progress=False, robot=robot)
    record = json.loads((result.run_dir / "selection.json").read_text())
    (candidate,) = record["candidates"]
    train_dt = cfg.env.sim_dt or robot.sim_dt
    assert train_dt != robot.sim_dt and candidate["sim_dt"] == train_dt
    again = evaluate(result.run_dir / candidate["onnx"], seconds=0.5, episodes=2, randomize=True,
                     command=cfg.selection.command, seed=11, robot=robot, robot_dt=False)
    assert (again["task_score"], again["success_rate"]) == (candidate["task_score"], candidate["success_rate"])
    # scores at one rate do not compete with scores at the other on resume
    robot_rate = SelectionConfig(iterations=2, every=2, episodes=2, seconds=0.5, seed=11, training_physics=False)
    with pytest.warns(UserWarning, match="other episodes"):
        assert PolicySelection(robot_rate, result.run_dir).candidates == []
    assert len(PolicySelection(cfg.selection, result.run_dir).candidates) == 1


def test_final_candidates_keep_their_validation_time_free_and_compete_in_their_own_budget(tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    plain = PolicySelection(SelectionConfig(minutes=1.0, every=10, final_candidates=False), tmp_path, averaging=True)
    assert plain.final_count() == 0 and plain.reserve_s(20.0) == 0.0
    sel = PolicySelection(SelectionConfig(minutes=1.0, every=10, final_candidates=True), tmp_path, averaging=True)
    assert sel.final_count() == 2 and sel.reserve_s(20.0) == 40.0, "the averaged policy and the last iterate"
    assert sel.reserve_s(20.0, max_iterations=3600) == 0.0, "an iteration budget's validations cost no training"
    single = PolicySelection(SelectionConfig(minutes=1.0, every=10, final_candidates=True), tmp_path)
    assert single.final_count() == 1 and single.reserve_s(20.0) == 20.0
    # a grid validation must leave the final ones their time
    assert plain.due(550, elapsed_s=550.0, budget_s=600.0, validation_s=20.0)
    assert not sel.due(550, elapsed_s=550.0, budget_s=600.0, validation_s=20.0)
    assert sel.due(540, elapsed_s=540.0, budget_s=600.0, validation_s=20.0)
    # before the first validation its length comes from the rollout: 128 episodes of 10 s at 500 Hz
    # (640k physics steps) at 25 us a step (half-speed machine: 1.25 s for 512 envs x 24 x 4) is 16 s
    first = PolicySelection(SelectionConfig(minutes=1.0, every=10, episodes=128, seconds=10.0), tmp_path, averaging=True)
    assert first.expected_validation_s(physics_step_s=1.25 / (512 * 24 * 4), sim_dt=0.002) == pytest.approx(16.28, abs=0.01)
    assert not first.due(560, elapsed_s=560.0, budget_s=600.0, validation_s=16.28), "a first validation leaves room too"
    sel.candidates = [
        {"iteration": 20, "actor": "exported", "elapsed_s": 40.0, "success_rate": 0.9, "task_score": 0.9,
         "final_of_budget_s": 120.0},  # a 2-minute run whose slow start put its end before the stretch
        {"iteration": 700, "actor": "exported", "elapsed_s": 560.0, "success_rate": 0.5, "task_score": 0.9},
        {"iteration": 730, "actor": "exported", "elapsed_s": 580.0, "success_rate": 0.6, "task_score": 0.8,
         "final_of_budget_s": 600.0},
        {"iteration": 730, "actor": "last_iterate", "elapsed_s": 590.0, "success_rate": 0.6, "task_score": 0.8,
         "final_of_budget_s": 600.0}]
    assert sel.best(120.0)["iteration"] == 20, "the final candidate competes in its own budget"
    best = sel.best(600.0)
    assert (best["iteration"], best["actor"]) == (730, "exported"), "a tie goes to the policy the run exports"
    sel.candidates[3]["success_rate"] = 0.7
    assert sel.best(600.0)["actor"] == "last_iterate"
    assert sel.best(1200.0) is None, "nor in a longer one it was resumed to"


def test_final_candidates_validate_the_last_iterate_beside_the_average(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig

    cfg = tiny_config()
    cfg.save_interval = 50
    cfg.selection = SelectionConfig(minutes=0.0, iterations=4, every=2, episodes=2, seconds=0.5, seed=11,
                                    final_candidates=True)
    result = train_policy(tmp_path / "run", PlaceholderReward(), cfg, max_iterations=12, progress=False, robot=robot)
    record = json.loads((result.run_dir / "selection.json").read_text())
    kinds = [(c["iteration"], c["actor"]) for c in record["candidates"]]
    assert kinds == [(10, "exported"), (12, "exported"), (12, "last_iterate")]
    iterate = next(c for c in record["candidates"] if c["actor"] == "last_iterate")
    obs = np.random.default_rng(1).normal(size=(8, load_policy(result.policy_path).num_obs)).astype(np.float32)
    # the iterate candidate is the policy the run ended on before averaging, not the average
    assert np.max(np.abs(load_policy(result.run_dir / iterate["onnx"])(obs)
                         - load_policy(result.last_iterate_path)(obs))) < 1e-6
    assert np.max(np.abs(load_policy(result.run_dir / "selection" / "policy_12.onnx")(obs)
                         - load_policy(result.run_dir / "policy_final.onnx")(obs))) < 1e-6
    best = max(record["candidates"], key=lambda c: (c["success_rate"], c["task_score"], c["iteration"],
                                                    c["actor"] == "exported"))
    assert (record["chosen_iteration"], record["chosen_actor"]) == (best["iteration"], best["actor"])
    assert (result.run_dir / "policy.onnx").read_bytes() == (result.run_dir / best["onnx"]).read_bytes()
