"""Choose the exported policy on held-out episodes: validation over the last stretch of a run.

The walking quality of consecutive PPO iterates swings by tens of points within a minute of
training (experiment log, bench/RESULTS.md in git history: "Held-out selection"), so the policy a run happens to end on can
be a poor one. The trainer exports the policy it would export at that point (the moving average,
or the iterate) every `selection.every` iterations of the budget's final stretch, runs it through
the ONNX evaluation users run (`motionvl eval`, randomised episodes at `selection.command`, on the
terrain the run trains on at a fixed level, at the robot's PD rate, or the training physics with
`selection.training_physics`), and
policy.onnx becomes the candidate with the best score. The stretch is the last `selection.minutes`
of a time budget (validation time is part of the budget) or the last `selection.iterations` PPO
iterations of an iteration budget (`max_iterations`; the choice is then the same on any machine).

With `selection.final_candidates` the policy the run ends on and, when the exported policy is a
moving average, the last iterate itself are validated too (a time budget keeps their time free at
its end): without them the iterations trained after the last grid candidate are never chosen.

Score: the evaluation's success rate (no fall and >= 90 % of the commanded distance), ties
broken by its task score. Every candidate sees the same episodes (`selection.seed`), so the
comparison is paired. Candidates and their scores live in RUN_DIR/selection/ and
RUN_DIR/selection.json; a resumed run keeps the ones validated before it was stopped, unless its
selection settings now give other validation episodes (then they are dropped, with a warning).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

from motionvl.policy_io import PolicyContract
from motionvl.rl.config import SelectionConfig
from motionvl.rl.evaluate import evaluate
from motionvl.sim.terrain import fixed_level
from motionvl.rl.export import export_policy

EXPORTED, LAST_ITERATE = "exported", "last_iterate"
"""Candidate kinds: the policy the run would export at that iteration (the moving average of the
iterates when averaging is on), and the iterate itself (validated only at the end of a run)."""
SCORE_KEYS = ("success_rate", "task_score", "fell_fraction", "forward_distance_m", "tracking_error_mps")


class PolicySelection:
    """Validates candidates as training reaches them and remembers the best one."""

    def __init__(self, cfg: SelectionConfig, run_dir: Path, robot=None, averaging: bool = False,
                 terrain: str = "flat", terrain_level: int | None = None, task: dict | None = None):
        """terrain, terrain_level: the ground the candidates are validated on (a level: the one evaluation uses,
        sim.terrain.fixed_level), as the run trains on it. task: the run's task (TrainConfig.task): validated at
        its command, terrain and criterion, recorded in every exported candidate; None: selection.command,
        walking distance on the run's ground."""
        self.cfg, self.robot, self.task = cfg, robot, task
        if task:
            terrain, terrain_level = task.get("terrain", "flat"), task.get("terrain_level")
        self.terrain = "flat" if terrain == "mixed" else terrain  # mixed's rough half has no evaluation world
        self.terrain_level = fixed_level(self.terrain, terrain_level)
        self.averaging = bool(averaging)
        """Whether the exported policy averages iterates (then the last iterate is a candidate of its own)."""
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / "selection"
        self.record_path = self.run_dir / "selection.json"
        self.candidates: list[dict] = []
        if self.record_path.exists():
            record = json.loads(self.record_path.read_text())
            written = record.get("config", {})
            if {k: written.get(k) for k in self._episodes_config()} == self._episodes_config():
                self.candidates = record.get("candidates", [])
            else:  # scores on other episodes are not comparable with the ones to come
                warnings.warn(f"{self.record_path}: the earlier candidates were validated on other episodes "
                              f"({record.get('config')}); they do not compete with the new ones", stacklevel=2)

    def _episodes_config(self) -> dict:
        """What decides the validation episodes (JSON-shaped, as selection.json records it)."""
        ground = {} if self.terrain == "flat" else {"terrain": self.terrain, "terrain_level": self.terrain_level}
        out = {"episodes": self.cfg.episodes, "seconds": self.cfg.seconds, "command": list(self.cfg.command),
               "seed": self.cfg.seed, "training_physics": bool(self.cfg.training_physics), **ground}
        if self.task:
            out.update(command=list(self.task["command"]), criterion=self.task.get("criterion"))
        return out

    def stretch_s(self, budget_s: float) -> float:
        """Seconds at the end of the budget in which candidates are validated: selection.minutes,
        at most a quarter of the budget (a short run still trains for most of its time)."""
        return min(self.cfg.minutes * 60.0, 0.25 * budget_s)

    def stretch_iterations(self, max_iterations: int | None) -> int:
        """PPO iterations at the end of an iteration budget in which candidates are validated:
        selection.iterations, at most a quarter of the budget; 0 without an iteration budget."""
        return min(self.cfg.iterations, max_iterations // 4) if max_iterations else 0

    def due(self, iteration: int, elapsed_s: float, budget_s: float, validation_s: float = 0.0,
            max_iterations: int | None = None) -> bool:
        """Whether the iterate just trained is a candidate: on the grid, and inside the final
        stretch of the time budget with time left for a validation as long as the last one
        (`validation_s`; before the first, `expected_validation_s`) and for the final candidates
        (`reserve_s`), or inside the final stretch of the iteration budget `max_iterations`."""
        if iteration % self.cfg.every:
            return False
        in_time = (self.cfg.minutes > 0 and budget_s - elapsed_s <= self.stretch_s(budget_s)
                   and elapsed_s + validation_s + self.reserve_s(validation_s, max_iterations) <= budget_s)
        return in_time or self._in_iteration_stretch(iteration, max_iterations)

    def final_count(self) -> int:
        """Validations at the end of the run: the policy it ends on, and the last iterate when the
        exported policy is an average of iterates."""
        return (1 + self.averaging) if self.cfg.final_candidates else 0

    def reserve_s(self, validation_s: float, max_iterations: int | None = None) -> float:
        """Seconds a time budget keeps free at its end for the final candidates, each as long as the
        last validation (`validation_s`, or before the first one `expected_validation_s`). An
        iteration budget's validations do not cost training, so it reserves nothing."""
        return 0.0 if max_iterations else self.final_count() * validation_s

    def expected_validation_s(self, physics_step_s: float, sim_dt: float) -> float:
        """How long a validation should take before one has been timed: its episodes simulate
        episodes x seconds / `sim_dt` physics steps (the evaluation's step), each costing what one
        cost in the last rollout (`physics_step_s`, policy and reward included). Without it the first
        validation could start in the budget's last seconds and the final ones run past its end."""
        return self.cfg.episodes * self.cfg.seconds / sim_dt * physics_step_s

    def validate_final(self, exported_actor, iterate_actor, contract: PolicyContract, iteration: int, elapsed_s: float,
                       budget_s: float) -> None:
        """With `final_candidates`: validate the policy the run ends on (unless the grid already
        did at this iteration) and, with averaging, the last iterate (`iterate_actor`). They compete
        in the time budget `budget_s` even where a slow start left them before its stretch."""
        if not self.cfg.final_candidates:
            return
        final = {"final_of_budget_s": round(float(budget_s), 2)}
        done = [x for x in self.candidates if x["iteration"] == iteration and x.get("actor", EXPORTED) == EXPORTED]
        if done:
            done[0].update(final)
        else:
            self.validate(exported_actor, contract, iteration, elapsed_s, extra=final)
        if self.averaging:
            self.validate(iterate_actor, contract, iteration, elapsed_s, actor_kind=LAST_ITERATE, extra=final)

    def _in_iteration_stretch(self, iteration: int, max_iterations: int | None) -> bool:
        return bool(max_iterations) and 0 <= max_iterations - iteration < self.stretch_iterations(max_iterations)

    def validate(self, actor, contract: PolicyContract, iteration: int, elapsed_s: float, actor_kind: str = "",
                 extra: dict | None = None) -> dict:
        """Export `actor` (the policy the run would export now, `elapsed_s` into the run, or with
        `actor_kind` LAST_ITERATE the iterate itself) with `contract`, evaluate it (observations and targets by motionvl.policy_io from the exported file's contract), record it."""
        c = self.cfg
        kind = actor_kind or EXPORTED
        suffix = "" if kind == EXPORTED else "_iterate"
        path = export_policy(actor, self.dir / f"policy_{iteration}{suffix}.onnx", contract,
                             extra_metadata={"task": self.task} if self.task else None)
        episodes = self._episodes_config()
        r = evaluate(path, seconds=c.seconds, episodes=c.episodes, randomize=True, command=tuple(episodes["command"]),
                     seed=c.seed, robot=self.robot, robot_dt=not c.training_physics, terrain=self.terrain,
                     terrain_level=self.terrain_level, criterion=episodes.get("criterion"))
        # the path relative to the run directory: a moved run directory still finds its candidates
        candidate = {"iteration": int(iteration), "actor": kind, "elapsed_s": round(float(elapsed_s), 2),
                     "onnx": str(path.relative_to(self.run_dir)), "sim_dt": r["sim_dt"],
                     **{k: r[k] for k in SCORE_KEYS}, **(extra or {})}
        self.candidates = [x for x in self.candidates
                           if (x["iteration"], x.get("actor", EXPORTED)) != (iteration, kind)] + [candidate]
        self._write()
        return candidate

    def best(self, budget_s: float, max_iterations: int | None = None) -> dict | None:
        """The candidate of the final stretch with the highest success rate (then task score; then
        the later one): the stretch of the iteration budget `max_iterations` when the run ended on
        it, else of the time budget `budget_s`. Candidates of an earlier, shorter budget (a run
        resumed with more minutes or iterations) are not in the stretch and do not compete."""
        if max_iterations:
            stretch = [x for x in self.candidates if self._in_iteration_stretch(x["iteration"], max_iterations)]
        else:
            start = budget_s - self.stretch_s(budget_s)
            stretch = [x for x in self.candidates
                       if x["elapsed_s"] >= start or x.get("final_of_budget_s") == round(float(budget_s), 2)]
        if not stretch:
            return None
        return max(stretch, key=lambda x: (x["success_rate"], x["task_score"], x["iteration"],
                                           x.get("actor", EXPORTED) == EXPORTED))

    def install(self, policy_path: Path, budget_s: float, max_iterations: int | None = None) -> dict | None:
        """Copy the best candidate (`best`'s arguments) over `policy_path` (keeping the run's own
        final policy beside it as policy_final.onnx) and record the choice; None when nothing was
        validated."""
        best = self.best(budget_s, max_iterations)
        if best is None:
            return None
        policy_path = Path(policy_path)
        shutil.copyfile(policy_path, policy_path.with_name("policy_final.onnx"))
        tmp = policy_path.with_name(policy_path.name + ".tmp")
        shutil.copyfile(self.run_dir / best["onnx"], tmp)
        os.replace(tmp, policy_path)
        self._write(chosen=best)
        return best

    def _write(self, chosen: dict | None = None) -> None:
        data = {"config": {"every": self.cfg.every, **self._episodes_config()},
                "chosen_iteration": chosen["iteration"] if chosen else None,
                "chosen_actor": chosen.get("actor", EXPORTED) if chosen else None,
                "candidates": sorted(self.candidates, key=lambda x: (x["iteration"], x.get("actor", EXPORTED)))}
        tmp = self.record_path.with_name(self.record_path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.record_path)
