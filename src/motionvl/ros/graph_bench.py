"""`motionvl bench graph`: what the training graph's other nodes cost while a trainer trains, between playbacks.

Runs `motionvl train --playback ros --record` (the orchestrator, reward_synthesizer, simulator, deployment node,
camera_renderer, vlm_critic and recorder in one process, each trainer in a child process) on a small search
whose start is played back early and whose candidates then train for minutes. Once the start's playback is in
the ledger and a trainer is busy, it sums the CPU time of every process of the graph that is not a trainer
(psutil) over `--seconds`, and the trainers' beside it. A playback during the window voids it (reported).
Goal: the non-trainer processes use < 0.1 of a core. With `--baseline` it first measures the graph as it ran
before the playback simulator held between playbacks (`hold_until_reset: false`), in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from motionvl.rl.config import add_dataclass_arguments, args_to_dataclass

GOAL_CORES = 0.1


@dataclasses.dataclass
class GraphBenchArgs:
    seconds: float = 60.0
    """Seconds of the measurement window."""
    out: str | None = None
    """Run directory of the search (default: a temporary one, removed after)."""
    settle_s: float = 10.0
    """Seconds after the trainer got busy before the window opens (its environments being built)."""
    timeout_s: float = 900.0
    """Give up when the window has not opened after this many seconds."""
    baseline: bool = False
    """Also measure the graph with the playback simulator running between playbacks (the old behaviour) first."""


def add_graph_bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, GraphBenchArgs)


# one iteration of one candidate: the start (2 PPO iterations) is played back at once, then the candidate
# trains at full size long enough for the window
SETTINGS = {"candidates": 1, "iterations": 1, "base_iterations": 2, "candidate_iterations": 400, "final_iterations": 2,
            "evaluation": {"episodes": 2, "seconds": 1.0}, "playback": {"seconds": 2.0},
            "gates": {"min_success_rate": 0.0, "max_fall_fraction": 1.0, "max_success_drop": 1.0,
                      "max_clipped_share": 1.0, "require_no_fault": False}}


def _played(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    return sum(json.loads(line).get("kind") == "played" for line in ledger.read_text().splitlines() if line.strip())


def _command(proc) -> str:
    try:
        return " ".join(proc.cmdline())
    except Exception:  # noqa: BLE001 - a process that ended (or a zombie) is nobody's trainer
        return ""


def _cpu(proc) -> float:
    try:
        times = proc.cpu_times()
        return times.user + times.system
    except Exception:  # noqa: BLE001 - a process that ended in the window counts what it had
        return 0.0


def run_graph_benchmark(args: argparse.Namespace) -> dict | int:
    a = args_to_dataclass(args, GraphBenchArgs)
    result = {}
    if a.baseline:
        before = _measure(dataclasses.replace(a, out=None), hold=False)
        if isinstance(before, int):
            return before
        result["baseline_running_between_playbacks"] = before
    now = _measure(a, hold=True)
    if isinstance(now, int):
        return now
    if a.baseline:
        print(f"bench graph: non-trainer cores {before['non_trainer_cores']:.3f} running between playbacks, "
              f"{now['non_trainer_cores']:.3f} held", file=sys.stderr)
    return {**now, **result}


def _share_without_hold(work: Path) -> Path:
    """A copy of the package's share directory whose playback simulator runs between playbacks."""
    import shutil

    import yaml

    from motionvl.robot import package_root

    share = work / "share"
    for folder in ("config", "urdf", "launch"):
        shutil.copytree(package_root() / folder, share / folder)
    playback = share / "config" / "simulation_playback.yaml"
    raw = yaml.safe_load(playback.read_text())
    raw["/**/simulator"]["ros__parameters"]["hold_until_reset"] = False
    playback.write_text(yaml.safe_dump(raw))
    return share


def _measure(a: GraphBenchArgs, hold: bool) -> dict | int:
    import psutil

    work = Path(tempfile.mkdtemp(prefix="motionvl_graph_bench_"))
    run_dir = Path(a.out) if a.out else work / "run"
    env = dict(os.environ) if hold else {**os.environ, "MOTIONVL_SHARE": str(_share_without_hold(work))}
    settings = work / "settings.yaml"
    settings.write_text(json.dumps(SETTINGS))
    command = [sys.executable, "-m", "motionvl.cli", "train", "--task", "walk forward with straight knees",
               "--playback", "ros", "--record", "--out", str(run_dir), "--settings", str(settings)]
    log = (work / "train.log").open("wb")
    main = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    graph = psutil.Process(main.pid)
    ledger = run_dir / "ledger.jsonl"
    try:
        end = time.monotonic() + a.timeout_s
        trainers: list = []
        while time.monotonic() < end:
            assert main.poll() is None, f"motionvl train ended ({main.returncode}); see {work / 'train.log'}"
            trainers = [c for c in graph.children(recursive=True) if "policy_trainer_node" in _command(c)]
            if _played(ledger) and trainers and max(c.cpu_percent(interval=1.0) for c in trainers) > 50:
                break
            time.sleep(1.0)
        else:
            print(f"motionvl bench graph: the window did not open within {a.timeout_s:g} s", file=sys.stderr)
            return 1
        print(f"bench graph: the start was played back, a trainer trains; settling {a.settle_s:g} s", file=sys.stderr)
        time.sleep(a.settle_s)
        others = [graph] + [c for c in graph.children(recursive=True) if c not in trainers]
        played = _played(ledger)
        before = {p.pid: _cpu(p) for p in others + trainers}
        t0 = time.monotonic()
        time.sleep(a.seconds)
        wall = time.monotonic() - t0
        per = {p.pid: (_cpu(p) - before[p.pid]) / wall for p in others + trainers}
        rows = [{"pid": p.pid, "process": _command(p)[:120], "trainer": p in trainers,
                 "cores": round(per[p.pid], 4)} for p in others + trainers]
        non_trainer = sum(r["cores"] for r in rows if not r["trainer"])
        valid = _played(ledger) == played
        for r in rows:
            print(f"  {'trainer' if r['trainer'] else 'graph  '} {r['cores']:.3f} cores  {r['process']}", file=sys.stderr)
        print(f"bench graph ({'held' if hold else 'running'} between playbacks): non-trainer processes "
              f"{non_trainer:.3f} cores over {wall:.0f} s (goal < {GOAL_CORES})"
              f"{'' if valid else ' -- VOID: a playback ran in the window'}", file=sys.stderr)
        return {"hold_between_playbacks": hold, "seconds": round(wall, 1), "non_trainer_cores": round(non_trainer, 4),
                "trainer_cores": round(sum(r["cores"] for r in rows if r["trainer"]), 3), "processes": rows,
                "valid": valid, "goal_cores": GOAL_CORES, "meets_goal": bool(valid and non_trainer < GOAL_CORES)}
    finally:
        if main.poll() is None:
            os.killpg(main.pid, signal.SIGINT)
            try:
                main.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(main.pid, signal.SIGKILL)
                main.wait()
        log.close()
