"""The whole search loop on a tiny budget with real trainer processes, evaluation, playback and the
kinematic critic: a full run and its outputs, bad candidates and a trainer crash, kill -9 and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from motionvl.rewards.spec import RewardSpec, load_reward_spec
from motionvl.search import deps
from motionvl.search.decision import decide
from motionvl.search.dispatch import LocalProcessSlot
from motionvl.search.ledger import Ledger
from motionvl.search.lineage import spec_hash
from motionvl.search.loop import Search, SearchSettings
from motionvl.search.playback import InProcessPlayback
from waiting import wait_for

TASK = "walk forward with straight knees"
TINY = {
    "candidates": 2, "iterations": 1, "base_iterations": 2, "candidate_iterations": 2, "final_iterations": 2,
    "training_overrides": ["env.num_envs=16", "env.episode_length_s=2.0", "ppo.num_steps_per_env=8",
                           "ppo.num_learning_epochs=1", "ppo.num_mini_batches=2", "ppo.actor_hidden_dims=[32,32]",
                           "ppo.critic_hidden_dims=[32,32]", "save_interval=1"],
    "evaluation": {"episodes": 2, "seconds": 1.0},
    "playback": {"seconds": 1.0, "render": False},
    # an untrained tiny policy walks nowhere: gates that pass it keep the rest of the loop in play
    "gates": {"min_success_rate": 0.0, "max_fall_fraction": 1.0, "max_success_drop": 1.0, "max_clipped_share": 1.0,
              "require_no_fault": False},
}


def _settings(**config) -> SearchSettings:
    from motionvl.search.config import SearchConfig

    merged = {**TINY, **config}
    return SearchSettings(task=TASK, mode="synth+critic", synthesizer="rules", critic="kinematic", preset="quick",
                          config=SearchConfig.from_dict(merged).to_dict())


def _search(run_dir, settings, *, synthesizer=None, slots=None, resume=False, render=False) -> Search:
    from motionvl.critic.base import create_critic
    from motionvl.search.config import PlaybackConfig

    slots = slots or [LocalProcessSlot("trainer-0", runs_dir=Path(run_dir) / "candidates")]
    return Search(run_dir, settings, synthesizer=synthesizer or deps.make_synthesizer("rules"),
                  critic=create_critic("kinematic"), playback=InProcessPlayback(PlaybackConfig(seconds=1.0, render=render)),
                  slots=lambda: slots, resume=resume, log=lambda m: None, progress=False)


def _egl_works() -> bool:
    try:
        from motionvl.render.camera import gl_backend  # noqa: F401
        import mujoco

        mujoco.GLContext(32, 32).free()
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One tiny search of one iteration, played back with rendering where EGL works."""
    run_dir = tmp_path_factory.mktemp("search") / "run"
    render = _egl_works()
    settings = _settings(playback={"seconds": 1.0, "render": render})
    summary = _search(run_dir, settings, render=render).run()
    return run_dir, summary, render


def test_a_search_ends_with_an_exported_policy_naming_its_run_spec_and_code(finished_run):
    import onnx

    run_dir, summary, _ = finished_run
    props = {p.key: json.loads(p.value) for p in onnx.load(str(run_dir / "policy.onnx")).metadata_props}
    spec = load_reward_spec(run_dir / "reward_spec.yaml").to_dict()
    assert props["motionvl_run"] == "run" and props["reward_spec_hash"] == spec_hash(spec) == summary["reward_spec_hash"]
    assert props["code_version"].startswith(("git:", "motionvl"))
    assert props["search_label"] == "RL-Rules+Kinematic", "an offline run is not called LLM or VLM"
    assert "joint_names" in props, "the deployment contract is kept"


def test_the_ledger_holds_every_step_and_the_lineage(finished_run):
    run_dir, _, _ = finished_run
    ledger = Ledger(run_dir)
    kinds = {r["kind"] for r in ledger.records}
    assert {"run", "start", "synthesis", "validated", "trained", "played", "critiqued", "decided", "exported",
            "table"} <= kinds
    synthesis = ledger.get("synthesis", "i1")
    assert synthesis["ids"] == ["i1k1", "i1k2"] and all(c["prompt"] for c in synthesis["candidates"])
    decision = ledger.get("decided", "i1")
    assert set(decision["verdicts"]) == {"i1k1", "i1k2"}
    assert all(v["reason"] for v in decision["verdicts"].values()), "every candidate says why it won or lost"
    for cid in ("start", "i1k1", "i1k2", "final"):
        trained = ledger.get("trained", cid)
        assert trained["ok"] and trained["outcome"]["evaluation"]["episodes"] == 2
    # warm start: candidates continue r*'s iteration count
    assert ledger.get("trained", "i1k1")["outcome"]["start_iteration"] == 2


def test_recorded_choices_are_recomputed_from_the_ledger(finished_run):
    """Replay of the decision: the recorded scores and judgements give the recorded choice again."""
    run_dir, _, _ = finished_run
    ledger = Ledger(run_dir)
    settings = SearchSettings(**{k: v for k, v in ledger.get("run", "settings").items()
                                 if k in SearchSettings.__dataclass_fields__})
    from motionvl.search.config import SearchConfig

    cfg = SearchConfig.from_dict(settings.config)

    def record(cid):
        trained = ledger.get("trained", cid)
        return {"id": cid, "evaluation": trained["outcome"]["evaluation"], "playback": ledger.get("played", cid),
                "feedback": ledger.get("critiqued", cid)}

    again = decide(record("start"), [record("i1k1"), record("i1k2")], gates=cfg.gates, ranking=cfg.ranking,
                   use_critic=True, judge=lambda c: ledger.get("compared", f"{c['id']}-vs-start"))
    recorded = ledger.get("decided", "i1")
    assert again["winner"] == recorded["winner"]
    assert {k: v["outcome"] for k, v in again["verdicts"].items()} == {k: v["outcome"] for k, v in recorded["verdicts"].items()}


def test_the_report_has_every_section(finished_run):
    run_dir, _, render = finished_run
    md = (run_dir / "report.md").read_text()
    for section in ("## Result", "## Chosen reward", "## How the reward evolved", "## Lineage", "## Iterations",
                    "## Learning curves", "## Table I layout", "## Where the time went"):
        assert section in md, section
    assert (run_dir / "report" / "weights_best.png").stat().st_size > 1000
    assert (run_dir / "report" / "learning_curves.png").stat().st_size > 1000
    assert "<table>" in (run_dir / "report.html").read_text()
    if render:
        assert "## Start and final playback" in md and (run_dir / "report" / "start_vs_final.png").exists()


def test_resuming_a_finished_run_trains_nothing_more(finished_run):
    run_dir, summary, render = finished_run
    before = len(Ledger(run_dir).records)
    settings = SearchSettings(**{k: v for k, v in Ledger(run_dir).get("run", "settings").items()
                                 if k in SearchSettings.__dataclass_fields__})
    again = _search(run_dir, settings, resume=True, render=render).run()
    assert again == summary and len(Ledger(run_dir).records) == before


# ----------------------------------------------------------------------------- bad candidates, crashes, caps
class ScriptedSynthesizer:
    """Test fixture standing in for a synthesizer: answers each iteration from a script, calls no model."""

    name = "scripted"
    offline = True

    def __init__(self, script: dict):
        self.script = script

    def propose(self, request):
        out = []
        for spec, rejection in self.script[request.iteration]:
            out.append(deps.candidate(spec=None if spec is None else RewardSpec.from_dict(spec), ok=rejection is None,
                                      rejection=rejection, prompt=f"scripted iteration {request.iteration}",
                                      response="scripted", attempts=1,
                                      usage={"prompt_tokens": 10, "completion_tokens": 5, "latency_s": 0.0,
                                             "cost": 0.0, "calls": 1}))
        return out


class KillingSlot(LocalProcessSlot):
    """A trainer whose process is killed with SIGKILL once the victim candidate is training."""

    def __init__(self, *args, victim: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.victim, self.killed = victim, False

    def poll(self):
        state = super().poll()
        if state.kind == "running" and self._cid == self.victim and state.phase == "training" and not self.killed:
            os.kill(self._proc.pid, signal.SIGKILL)
            self.killed = True
        return state


def test_refused_code_a_trainer_crash_and_the_call_cap_leave_r_star_and_the_run_goes_on(tmp_path):
    reference = load_reward_spec().to_dict()
    refused = json.loads(json.dumps(reference))
    refused["terms"]["sum_speed"] = {"weight": 0.2, "source": "generated"}
    refused["code"] = "def _reward_sum_speed(state):\n    return state.base_lin_vel[:, 0].sum()\n"
    crashing = json.loads(json.dumps(reference))
    crashing["terms"]["orientation"]["weight"] = 0.6
    script = {0: [(refused, None), (crashing, None), (None, "unparseable answer: no JSON object found")],
              1: [(reference, None)]}
    run_dir = tmp_path / "run"
    slot = KillingSlot("trainer-0", runs_dir=run_dir / "candidates", victim="i1k2")
    settings = _settings(candidates=3, iterations=2, limits={"max_synth_calls": 3})
    settings.synthesizer = "scripted"
    summary = _search(run_dir, settings, synthesizer=ScriptedSynthesizer(script), slots=[slot]).run()

    ledger = Ledger(run_dir)
    first = ledger.get("decided", "i1")
    assert first["winner"] is None and "r* stays start" in first["summary"]
    verdicts = first["verdicts"]
    assert "sandbox refused" in verdicts["i1k1"]["reason"] and "returned a scalar" in verdicts["i1k1"]["reason"]
    assert "killed by signal 9" in verdicts["i1k2"]["reason"]
    assert "unparseable" in verdicts["i1k3"]["reason"]
    second = ledger.get("decided", "i2")
    assert second["winner"] is None and "cap reached" in second["note"]
    assert summary["best"] == "start" and (run_dir / "policy.onnx").exists(), "the run finished on r*"
    assert ledger.get("trained", "final")["outcome"]["start_iteration"] == 2, "the final run continues the start"


# ----------------------------------------------------------------------------- kill -9 and resume
def test_kill_9_and_resume_finishes_without_redoing_finished_work(tmp_path):
    import yaml

    settings = tmp_path / "tiny.yaml"
    settings.write_text(yaml.safe_dump({**TINY, "candidates": 1, "candidate_iterations": 4}))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "motionvl.cli", "train", "--task", TASK, "--settings", str(settings), "--out", str(run_dir),
           "--no-progress", "--no-render"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    beat = run_dir / "candidates" / "i1k1" / "heartbeat.json"

    def candidate_half_trained():
        try:
            state = json.loads(beat.read_text())
        except (OSError, ValueError):
            return False
        return state.get("phase") == "training" and (state.get("iteration") or 0) >= 4
    try:
        assert wait_for(candidate_half_trained, timeout=300, period=0.05), proc.stderr.read() if proc.poll() else ""
        worker = json.loads(beat.read_text())["pid"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_for(lambda: not _alive(worker), timeout=20), "the trainer process died with the search"
    trained_before = {r["key"] for r in Ledger(run_dir).records if r["kind"] == "trained"}
    assert "start" in trained_before and "i1k1" not in trained_before

    done = subprocess.run([sys.executable, "-m", "motionvl.cli", "train", "--out", str(run_dir), "--resume", "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ledger = Ledger(run_dir)
    keys = [r["key"] for r in ledger.records if r["kind"] == "trained"]
    assert sorted(keys) == ["final", "i1k1", "start"], "no step done twice"
    history = [json.loads(line)["iteration"] for line in
               (run_dir / "candidates" / "i1k1" / "history.jsonl").read_text().splitlines()]
    assert history == [3, 4, 5, 6], "the candidate resumed from its checkpoint, no iteration lost or repeated"
    assert ledger.get("run", "finished") is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
