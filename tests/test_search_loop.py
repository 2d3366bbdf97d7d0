"""The whole search loop on a tiny budget with real trainers, evaluation, playback and the kinematic critic:
through the real nodes over DDS in one process (its outputs, replayed choices, resume), with two trainer
processes one of which disappears, bad candidates and a trainer crash (the core loop), kill -9 and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from motionvl.rewards.spec import RewardSpec, load_reward_spec
from motionvl.search.decision import decide
from motionvl.search.dispatch import LocalProcessSlot
from motionvl.search.ledger import Ledger
from motionvl.rewards.spec import reward_key
from motionvl.search.loop import Search, SearchError, SearchSettings
from motionvl.search.playback import InProcessPlayback
from motionvl.synth import Candidate, make_synthesizer
from render_fixtures import egl_works
from waiting import wait_for

TASK = "walk forward with straight knees"
ROBOT_NAME = "search_test_biped"
TINY = yaml.safe_load((Path(__file__).parent / "data" / "search_tiny.yaml").read_text())


def _settings(**config) -> SearchSettings:
    from motionvl.search.config import SearchConfig

    merged = {**TINY, **config}
    return SearchSettings(task=TASK, mode="synth+critic", synthesizer="rules", critic="kinematic", preset="quick",
                          config=SearchConfig.from_dict(merged).to_dict())


def _search(run_dir, settings, *, synthesizer=None, slots=None, resume=False, render=False) -> Search:
    from motionvl.critic.base import create_critic
    from motionvl.search.config import PlaybackConfig

    slots = slots or [LocalProcessSlot("trainer-0", runs_dir=Path(run_dir) / "candidates")]
    return Search(run_dir, settings, synthesizer=synthesizer or make_synthesizer("rules"),
                  critic=create_critic("kinematic"),
                  playback=InProcessPlayback(PlaybackConfig(seconds=1.0, render=render), robot=settings.robot()),
                  slots=lambda: slots, resume=resume, log=lambda m: None, progress=False)


def _settings_file(directory: Path, **config) -> Path:
    path = directory / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, **config}))
    return path


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One tiny search of one iteration through the real nodes over DDS in this process (orchestrator,
    policy_trainer, recorder), played back with rendering where EGL works, on a robot config of its own
    (the package's robot renamed: ROBOT_NAME)."""
    from deploy_fixtures import write_robot_yaml
    from motionvl.ros.train_graph import run_train_graph

    base = tmp_path_factory.mktemp("search")
    run_dir = base / "run"
    render = egl_works()
    settings = _settings_file(base, playback={"seconds": 1.0, "render": render})
    robot = str(write_robot_yaml(base, name=ROBOT_NAME))
    code = run_train_graph({"run_dir": str(run_dir), "task": TASK, "settings_file": str(settings), "render": render,
                            "robot_config": robot}, trainers=1, trainers_in_process=True, record=True, robot_config=robot)
    assert code == 0
    summary = Ledger(run_dir).get("run", "finished")
    return run_dir, summary, render


def test_a_search_ends_with_an_exported_policy_naming_its_run_spec_and_code(finished_run):
    import onnx

    run_dir, summary, _ = finished_run
    props = {p.key: json.loads(p.value) for p in onnx.load(str(run_dir / "policy.onnx")).metadata_props}
    spec = load_reward_spec(run_dir / "reward_spec.yaml").to_dict()
    assert props["motionvl_run"] == "run" and props["reward_spec_hash"] == reward_key(spec) == summary["reward_spec_hash"]
    assert summary["best"] in ("start", "i1k1", "i1k2")
    assert props["code_version"].startswith(("git:", "motionvl"))
    assert props["search_label"] == "RL-Rules+Kinematic", "an offline run is not called LLM or VLM"
    assert "joint_names" in props, "the deployment contract is kept"


def test_the_trainers_and_the_playback_use_the_runs_robot_config(finished_run):
    """The run's robot YAML reaches the trainer (its policies' contracts name that robot) and the orchestrator's
    playback (which refuses a policy of another robot): every played candidate ran, none failed to load."""
    import onnx

    run_dir, _, _ = finished_run
    ledger = Ledger(run_dir)
    assert ledger.get("run", "settings")["robot_config"].endswith("robot.yaml")
    played = dict(ledger.items("played"))
    assert played, "candidates were played back"
    for cid, result in played.items():
        policy = ledger.get("trained", cid)["outcome"]["policy_path"]
        props = {p.key: json.loads(p.value) for p in onnx.load(policy).metadata_props}
        assert props["robot_name"] == ROBOT_NAME, cid
        assert not str(result.get("fault") or "").startswith("playback failed"), result["fault"]


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
        assert trained["outcome"]["evaluation"]["success_fraction"] == pytest.approx(5 / 6), "the walking criterion"
        assert trained["trainer"] == "/policy_trainer_0", "trained by the policy_trainer node"
    # warm start: candidates continue r*'s schedules from its last iteration
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


def test_the_loop_benchmark_splits_a_runs_wall_time_into_training_and_the_rest(finished_run):
    from motionvl.search.bench import loop_overhead

    run_dir, _, _ = finished_run
    figures = loop_overhead(run_dir)
    assert figures["finished"] and 0.0 < figures["train_s"] < figures["wall_s"]
    assert figures["parts"]["playback"] > 0 and figures["parts"]["table"] > 0
    assert sum(figures["parts"].values()) == pytest.approx(figures["overhead_s"])
    assert figures["overhead_share"] == pytest.approx(figures["overhead_s"] / figures["wall_s"])


def test_the_recorder_kept_the_search_on_the_graph(finished_run):
    from motionvl.bags import read_bag

    run_dir, _, _ = finished_run
    (bag,) = (run_dir / "bags").iterdir()
    messages = list(read_bag(bag))
    topics = {topic for topic, *_ in messages}
    feedback, status = "/policy_trainer_0/train_candidate/_action/feedback", "/policy_trainer_0/train_candidate/_action/status"
    assert {"/search/ledger", "/search/state", "/trainer/heartbeat", feedback, status} <= topics, topics
    phases = {msg.feedback.phase for topic, _, _, msg in messages if topic == feedback}
    assert {"queued", "training", "evaluating"} <= phases, "every candidate's training is in the bag"


def test_resuming_a_finished_run_trains_nothing_more(finished_run):
    run_dir, summary, render = finished_run
    before = len(Ledger(run_dir).records)
    settings = SearchSettings(**{k: v for k, v in Ledger(run_dir).get("run", "settings").items()
                                 if k in SearchSettings.__dataclass_fields__})
    again = _search(run_dir, settings, resume=True, render=render).run()
    assert again == summary and len(Ledger(run_dir).records) == before


def test_an_exported_policy_played_without_rendering_is_filmed_for_the_report(finished_run, tmp_path):
    """A candidate exported as r* (the final training failed the gates) was played without rendering: the report
    gets its playback filmed once, from a copy of the finished run."""
    import shutil

    from motionvl.search.report import RunView

    run_dir, _, render = finished_run
    if not render:
        pytest.skip("EGL rendering is not available on this machine")
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(".lock", "bags"))
    ledger = Ledger(copy)
    settings = SearchSettings(**{k: v for k, v in ledger.get("run", "settings").items()
                                 if k in SearchSettings.__dataclass_fields__})
    record = {"id": "i1k1", "outcome": ledger.get("trained", "i1k1")["outcome"], "playback": ledger.get("played", "i1k1")}
    assert not record["playback"].get("video"), "candidates are played without rendering"
    search = _search(copy, settings, resume=True, render=True)
    try:
        search._film(record)
        search._film({**record, "playback": Ledger(copy).get("filmed", "i1k1")})  # filmed already: nothing more
    finally:
        search.close()
    filmed = [data for key, data in Ledger(copy).items("filmed") if key == "i1k1"]
    assert len(filmed) == 1 and Path(filmed[0]["video"]).stat().st_size > 0
    assert RunView(copy).candidates["i1k1"]["playback"]["video"] == filmed[0]["video"], "the report shows the film"


# ----------------------------------------------------------------------------- two trainer processes
def _my_child(argument: str) -> int | None:
    """The pid of this process's descendant whose command line holds `argument` (a process this test started)."""
    mine = {os.getpid()}
    found = None
    for _ in range(3):  # descendants: children of children
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
                pid, ppid = int(fields["Pid"]), int(fields["PPid"])
                cmdline = (status.parent / "cmdline").read_bytes().split(b"\0")
            except (OSError, KeyError, ValueError):
                continue
            if ppid in mine:
                mine.add(pid)
                if argument.encode() in cmdline:
                    found = pid
    return found


def test_two_trainer_processes_share_an_iteration_and_a_lost_trainers_candidate_moves_on(tmp_path):
    """Two policy_trainer processes take one candidate each; one is killed while it trains, the orchestrator
    hands its candidate to the other and the search finishes."""
    from motionvl.ros.train_graph import run_train_graph

    settings = _settings_file(tmp_path, candidates=2, candidate_iterations=8, final_iterations=0,
                              limits={"trainer_lost_s": 4.0})
    run_dir = tmp_path / "run"
    killed = {}

    def kill_a_training_trainer():  # trainers are handed candidates in name order: i1k2 goes to policy_trainer_1
        history = run_dir / "candidates" / "i1k2" / "history.jsonl"
        if not wait_for(lambda: history.exists() and history.read_text().strip(), timeout=400, period=0.05):
            return
        pid = _my_child("__node:=policy_trainer_1")
        if pid is None:
            return
        os.kill(pid, signal.SIGSTOP)  # frozen first: it cannot finish the candidate between the check and the kill
        if not Ledger(run_dir).has("trained", "i1k2"):
            killed["name"] = "policy_trainer_1"
        os.kill(pid, signal.SIGKILL)

    import threading

    killer = threading.Thread(target=kill_a_training_trainer, daemon=True)
    killer.start()
    code = run_train_graph({"run_dir": str(run_dir), "task": TASK, "settings_file": str(settings), "render": False},
                           trainers=2)
    killer.join(5)
    assert code == 0 and killed, "a trainer was killed and the search still finished"
    ledger = Ledger(run_dir)
    trained = {cid: ledger.get("trained", cid) for cid in ("i1k1", "i1k2")}
    assert all(t["ok"] for t in trained.values()), trained
    assert {t["trainer"] for t in trained.values()} == {"/policy_trainer_0"}, "the lost trainer's candidate moved on"
    assert ledger.get("run", "finished") is not None


def test_a_starved_trainer_is_not_left_training_a_candidate_it_was_already_handed_again(tmp_path):
    """A trainer frozen past trainer_lost_s (a starved process on a loaded machine) is taken for gone and its
    candidate sent again; once it runs again it must not keep training the stale goal while the new one waits
    (which used to fail the start: "no progress ... last: queued"): the stale goal is cancelled, the candidate
    resumes from its checkpoint and the search finishes."""
    from motionvl.ros.train_graph import run_train_graph

    settings = _settings_file(tmp_path, candidates=1, iterations=0, base_iterations=60, final_iterations=0,
                              limits={"trainer_lost_s": 3.0, "heartbeat_s": 60.0})
    run_dir = tmp_path / "run"
    frozen = {}

    def freeze_the_trainer_for_a_while():
        history = run_dir / "candidates" / "start" / "history.jsonl"
        if not wait_for(lambda: history.exists() and len(history.read_text().splitlines()) >= 5, timeout=400,
                        period=0.05):
            return
        pid = _my_child("__node:=policy_trainer_0")
        if pid is None:
            return
        os.kill(pid, signal.SIGSTOP)
        frozen["at"] = len(history.read_text().splitlines())
        time.sleep(6.0)
        os.kill(pid, signal.SIGCONT)

    import threading

    freezer = threading.Thread(target=freeze_the_trainer_for_a_while, daemon=True)
    freezer.start()
    code = run_train_graph({"run_dir": str(run_dir), "task": TASK, "settings_file": str(settings), "render": False},
                           trainers=1)
    freezer.join(10)
    assert frozen and frozen["at"] < 60, "the trainer was frozen while it trained the start"
    assert code == 0, "the search finished"
    trained = Ledger(run_dir).get("trained", "start")
    assert trained["ok"] and trained["outcome"]["iterations"] == 60, trained
    log = (run_dir / "logs" / "policy_trainer_0.log").read_text()
    assert "cancel of 'start': stopping after this iteration" in log and "start: cancelled" in log, \
        "the stale goal was cancelled, not trained to its end beside the one sent again"


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
            out.append(Candidate(spec=None if spec is None else RewardSpec.from_dict(spec), ok=rejection is None,
                                      rejection=rejection, prompt=f"scripted iteration {request.iteration}",
                                      response="scripted", attempts=1,
                                      usage={"prompt_tokens": 10, "completion_tokens": 5, "latency_s": 0.0,
                                             "cost": 0.0, "calls": 1}))
        return out


class KillingSlot(LocalProcessSlot):
    """A trainer whose process is killed with SIGKILL as the victim candidate is handed to it. The process is
    frozen (SIGSTOP) before it gets the job, so however fast the machine, the job cannot end before the kill."""

    def __init__(self, *args, victim: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.victim, self.killed = victim, False

    def start(self, job):
        if job.candidate_id != self.victim or self.killed:
            return super().start(job)
        proc = self._process()
        os.kill(proc.pid, signal.SIGSTOP)
        super().start(job)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.killed = True


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
    settings = _settings(candidates=3, iterations=2, limits={"max_synth_calls": 3},
                         gates={"min_success_rate": 0.84})  # the run's own gate reaches the synthesizer
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
    tried = ledger.get("synthesis", "i2")["request"]["tried"]
    assert ledger.get("synthesis", "i2")["request"]["gates"] == {"min_success_rate": 0.84}
    assert [(t["id"], t["parent"], t["outcome"]) for t in tried] == [("i1k1", "start", "failed"), ("i1k2", "start", "failed"),
                                                                     ("i1k3", "start", "refused")]
    assert tried[0]["code"] == refused["code"], "iteration 2 was told what iteration 1 tried"
    assert "returned a scalar" in tried[0]["reason"] and "killed by signal 9" in tried[1]["reason"], "with the causes"
    assert "unparseable" in tried[2]["reason"], "and the answer refused at synthesis, with why"
    assert summary["best"] == "start" and (run_dir / "policy.onnx").exists(), "the run finished on r*"
    assert ledger.get("trained", "final")["outcome"]["start_iteration"] == 2, "the final run continues the start"


def test_a_resume_trains_again_a_start_whose_training_failed(tmp_path):
    """The start's training failing ends the session (no r*); resuming the run directory trains the start again
    (the failure stays recorded, with the retry that superseded it) instead of repeating the failure."""
    run_dir = tmp_path / "run"
    settings = _settings(candidates=1, iterations=1)
    slot = KillingSlot("trainer-0", runs_dir=run_dir / "candidates", victim="start")
    with pytest.raises(SearchError, match="start policy .*failed: .*killed by signal 9"):
        _search(run_dir, settings, slots=[slot]).run()
    summary = _search(run_dir, settings, resume=True).run()
    ledger = Ledger(run_dir)
    assert ledger.get("trained", "start")["ok"] and (run_dir / "policy.onnx").exists(), summary
    (key, retry), = ledger.items("retry")
    assert retry["step"] == ["trained", "start"] and "killed by signal 9" in retry["reason"], retry
    failed = [d for k, d in ledger.items("trained") if k == "start" and not d["ok"]]
    assert len(failed) == 1, "the failed attempt stays in the ledger"
    assert Ledger(run_dir).get("trained", "start")["ok"], "a reopened ledger sees the retried step"


# ----------------------------------------------------------------------------- Ctrl-C, kill -9 and resume
def test_ctrl_c_then_kill_9_and_resume_finish_without_redoing_finished_work(tmp_path):
    """motionvl train stopped by SIGINT (clean: exit 130, resumable), resumed and killed with SIGKILL while a
    candidate trains (its trainer dies with it), resumed again: the search finishes with every step done once
    and the candidate's run continued from its checkpoint. Both times the trainer is held (SIGSTOP) once the
    candidate has trained an iteration more, so it cannot finish while the search stops, however fast the machine;
    after Ctrl-C it is ended while held once the search has passed the stop on to it (as a trainer that does not
    heed the stop would be)."""
    budget = 4
    settings = _settings_file(tmp_path, candidates=1, candidate_iterations=budget)
    run_dir = tmp_path / "run"
    history = run_dir / "candidates" / "i1k1" / "history.jsonl"
    start = [sys.executable, "-m", "motionvl.cli", "train", "--task", TASK, "--settings", str(settings),
             "--out", str(run_dir), "--no-progress", "--no-render"]
    resume = [sys.executable, "-m", "motionvl.cli", "train", "--out", str(run_dir), "--resume", "--no-progress"]

    def lines() -> int:
        try:
            return len(history.read_text().splitlines())
        except OSError:
            return 0

    first = subprocess.Popen(start, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        trainer = _trainer_of(first)
        assert wait_for(lambda: lines() >= 1 or first.poll() is not None, timeout=400, period=0.01), _said(first)
        os.kill(trainer, signal.SIGSTOP)
        held = lines()
        first.send_signal(signal.SIGINT)
        assert wait_for(lambda: _pending(trainer, signal.SIGINT) or not _alive(trainer), timeout=60), \
            "the search passed its stop on to the trainer"
        os.kill(trainer, signal.SIGKILL)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130 and "--resume" in err, err[-2000:]
    assert not Ledger(run_dir).has("trained", "i1k1"), "a stopped candidate is not recorded as trained"
    after_first = lines()
    assert 1 <= held == after_first < budget, (held, after_first)

    second = subprocess.Popen(resume, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        trainer = _trainer_of(second)
        assert wait_for(lambda: lines() > after_first or second.poll() is not None, timeout=400, period=0.01), \
            _said(second)
        os.kill(trainer, signal.SIGSTOP)  # held: the candidate cannot finish before the search is killed
        second.send_signal(signal.SIGKILL)
        second.wait(10)
    finally:
        if second.poll() is None:
            second.kill()
    assert wait_for(lambda: not _alive(trainer), timeout=20), "the trainer process died with the search"
    assert "i1k1" not in {r["key"] for r in Ledger(run_dir).records if r["kind"] == "trained"}

    done = subprocess.run(resume, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ledger = Ledger(run_dir)
    keys = [r["key"] for r in ledger.records if r["kind"] == "trained"]
    assert sorted(keys) == ["final", "i1k1", "start"], "no step done twice"
    iterations = [json.loads(line)["iteration"] for line in history.read_text().splitlines()]
    assert iterations == list(range(1, 1 + budget)), "the candidate resumed from its checkpoint, no iteration lost or repeated"
    assert ledger.get("run", "finished") is not None and len(list(ledger.items("synthesis"))) == 1


def test_a_second_search_in_one_namespace_is_refused_and_runs_beside_the_first_in_its_own(tmp_path):
    """Two `motionvl train` on one ROS domain: the second in the first's namespace stops before starting anything,
    naming the first's run directory; given its own --namespace it runs beside the first, each search training
    on its own trainer only."""
    from motionvl.ros.train_graph import running_search

    longer = _settings_file(tmp_path, base_iterations=40)  # the first search still runs while the others start
    train = [sys.executable, "-m", "motionvl.cli", "train", "--task", TASK, "--no-progress", "--no-render"]
    first_dir, refused_dir, second_dir = tmp_path / "first", tmp_path / "refused", tmp_path / "second"
    first = subprocess.Popen([*train, "--settings", str(longer), "--out", str(first_dir)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: running_search("") == str(first_dir) or first.poll() is not None, timeout=300), \
            _said(first)
        refused = subprocess.run([*train, "--settings", str(longer), "--out", str(refused_dir)], capture_output=True,
                                 text=True, timeout=120)
        assert refused.returncode == 1, refused.stderr[-2000:]
        assert f"another search (run directory {first_dir})" in refused.stderr and "--namespace" in refused.stderr
        assert not refused_dir.exists(), "a refused search starts nothing"
        assert first.poll() is None, "the first search was meant to outlast the refused one"
        (tmp_path / "s2").mkdir()
        second = subprocess.run([*train, "--settings", str(_settings_file(tmp_path / "s2", candidates=1)),
                                 "--out", str(second_dir), "--namespace", "second"], capture_output=True, text=True,
                                timeout=600)
        assert second.returncode == 0, second.stderr[-3000:]
        assert first.wait(timeout=600) == 0, _said(first)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    first_log = (first_dir / "logs" / "policy_trainer_0.log").read_text()
    second_log = (second_dir / "logs" / "policy_trainer_0.log").read_text()
    assert "/second/policy_trainer_0/train_candidate" in second_log
    assert str(second_dir) not in first_log and str(first_dir) not in second_log, "a trainer trained the other's job"
    for run_dir in (first_dir, second_dir):
        trained = [record for _key, record in Ledger(run_dir).items("trained")]
        assert trained and all(record["ok"] for record in trained), run_dir


def _trainer_of(search: subprocess.Popen) -> int:
    """The pid of the policy_trainer process `motionvl train` started."""
    assert wait_for(lambda: _my_child("__node:=policy_trainer_0") or search.poll() is not None, timeout=400)
    trainer = _my_child("__node:=policy_trainer_0")
    assert trainer is not None, _said(search)
    return trainer


def _said(search: subprocess.Popen) -> str:
    """What an ended search wrote on stderr (nothing while it runs: reading would wait for its end)."""
    return search.stderr.read()[-2000:] if search.poll() is not None else "(still running)"


def _pending(pid: int, signum: int) -> bool:
    """Whether signal `signum` waits to be delivered to process `pid` (a stopped process keeps it pending)."""
    try:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    except OSError:
        return False
    return bool(int(fields.get("ShdPnd", "0"), 16) & (1 << (signum - 1)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# ----------------------------------------------------------------------------- a model-backed synthesizer, replayed
def test_the_loop_carries_on_through_repaired_refused_and_garbage_answers_and_a_replay_repeats_its_choices(tmp_path):
    """The openai synthesizer against a real loopback server serving recorded answers (a fixture, not a model):
    one candidate repaired after garbage, one the sandbox refuses twice, one garbage twice; the search goes on.
    The `replay` synthesizer then answers from that run's ledger without the server, and the choices repeat."""
    from synth_fixtures import RecordedAnswerServer, answer

    reference = load_reward_spec().to_dict()
    knees = json.loads(json.dumps(reference))
    knees["terms"]["knee_extension"] = {"weight": 0.4, "params": {"max_angle": 0.2}}
    unsafe = json.loads(json.dumps(reference))
    unsafe["terms"]["sneaky"] = {"weight": 0.2, "source": "generated"}
    unsafe["code"] = "import os\n\ndef _reward_sneaky(state):\n    return np.ones(state.num_envs)\n"
    say = lambda spec: json.dumps({"rationale": "straighter stance knees", **spec})  # noqa: E731
    recording = [answer("walk with straight knees, I suppose"), answer(say(knees)),
                 answer(say(unsafe)), answer(say(unsafe)),
                 answer("```\n{not json at all\n```"), answer("", finish_reason="length")]
    settings = _settings(candidates=3)
    settings.synthesizer = "openai"
    first = tmp_path / "recorded"
    with RecordedAnswerServer(recording) as server:
        synthesizer = make_synthesizer("openai", base_url=server.url, model="recorded-llm", max_repairs=1,
                                       backoff_s=0.01, timeout_s=10.0)
        summary = _search(first, settings, synthesizer=synthesizer).run()
    ledger = Ledger(first)
    record = ledger.get("synthesis", "i1")
    assert [c["ok"] for c in record["candidates"]] == [True, False, False]
    assert record["candidates"][0]["attempts"] == 2, "the garbage answer was repaired"
    verdicts = ledger.get("decided", "i1")["verdicts"]
    assert verdicts["i1k1"]["outcome"] in ("won", "lost", "gated")
    assert "import" in verdicts["i1k2"]["reason"] and verdicts["i1k3"]["outcome"] == "failed"
    assert summary["label"] == "RL-LLM+Kinematic"

    replayed = tmp_path / "replayed"
    settings.synthesizer = "replay"
    again = _search(replayed, settings, synthesizer=make_synthesizer("replay", ledger=str(first / "ledger.jsonl"))).run()
    recorded_choice = ledger.get("decided", "i1")
    replayed_choice = Ledger(replayed).get("decided", "i1")
    assert replayed_choice["winner"] == recorded_choice["winner"] and again["best"] == summary["best"]
    assert {k: v["outcome"] for k, v in replayed_choice["verdicts"].items()} == \
        {k: v["outcome"] for k, v in recorded_choice["verdicts"].items()}
    assert Ledger(replayed).get("synthesis", "i1")["candidates"][0]["spec"] == record["candidates"][0]["spec"]


def test_table_i_shows_the_terrain_level_training_reached(finished_run, tmp_path):
    """On a terrain with levels each Table I row gives the mean level of the policy's last training iteration
    (beside the terrain and level it was evaluated on, as every row does); a run on flat ground has no such column."""
    import shutil

    from motionvl.search.report import write_report

    run_dir, _, _ = finished_run
    assert "terrain level" not in (run_dir / "report.md").read_text()
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    records = [json.loads(line) for line in (copy / "ledger.jsonl").read_text().splitlines()]
    for record in records:  # as a run on stairs would have recorded them
        if record["kind"] == "trained" and record.get("outcome"):
            record["outcome"]["term_stats"]["terrain_level"] = {"last": 3.5}
            record["outcome"]["evaluation"].update(terrain="stairs_up", terrain_level=4)
    (copy / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_report(copy)
    md = (copy / "report.md").read_text()
    table = md[md.index("## Table I layout"):md.index("## Where the time went")]
    header = next(line for line in table.splitlines() if line.startswith("| method"))
    assert header.rstrip(" |").endswith("terrain level (training)") and "terrain (level)" in header
    rows = [line for line in table.splitlines() if line.startswith("| RL-Base")]
    assert rows and rows[0].rstrip(" |").endswith("3.5")


# ----------------------------------------------------------------------------- garbage on the graph's topics
GARBAGE_PUBLISHER = """
import sys, time
import rclpy
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node("garbage_publisher")
qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
topics = sys.argv[1].split(",")
payloads = ["x", "[1]", "null", '"a string"', '{"trainer": 5}', '{"request_id": 7}', '{"request_id": "r"}',
            '{"meta": 3, "request_id": "r"}', "{" * 1000]
pubs = [node.create_publisher(String, t, qos) for t in topics]
print("ready", flush=True)
while True:
    for pub in pubs:
        for payload in payloads:
            pub.publish(String(data=payload))
    time.sleep(0.2)
"""
GRAPH_TOPICS = ("trainer/heartbeat", "rollout/boundary", "critic/feedback", "critic/comparison", "deployment/status",
                # the JSON topics of before the actions: nothing reads them now, a publisher there changes nothing
                "trainer/status", "trainer/progress", "synthesizer/candidates", "synthesizer/request", "critic/compare")


def test_a_search_finishes_while_malformed_messages_arrive_on_every_graph_topic(tmp_path, capfd):
    """Strings (non-JSON, non-object, wrongly typed) on the graph's topics (a typo in `ros2 topic pub`): a typed
    topic reports their publisher, the others have no reader in this graph; the search finishes as without them."""
    from motionvl.ros.train_graph import run_train_graph

    # long enough (several seconds) for the orchestrator's graph check (every 2 s) to run while the strings arrive
    settings = _settings_file(tmp_path, candidates=2, iterations=2, final_iterations=0)
    publisher = subprocess.Popen([sys.executable, "-c", GARBAGE_PUBLISHER, ",".join(GRAPH_TOPICS)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        # the strings are on the wire before the graph starts (a tiny search ends in seconds; a loaded machine
        # starts the publisher's interpreter in about as long)
        assert publisher.stdout.readline() == b"ready\n", publisher.stderr.read().decode(errors="replace")[-2000:]
        code = run_train_graph({"run_dir": str(tmp_path / "run"), "task": TASK, "settings_file": str(settings),
                                "render": False}, trainers=1, trainers_in_process=True)
        assert publisher.poll() is None, publisher.stderr.read().decode(errors="replace")[-2000:]
    finally:
        os.killpg(publisher.pid, signal.SIGKILL)
        publisher.wait()
    err = capfd.readouterr().err
    assert code == 0 and Ledger(tmp_path / "run").get("run", "finished") is not None, err[-3000:]
    # a typed topic never hears the strings: their publisher is reported instead
    assert "/trainer/heartbeat: publisher(s) of another type than motionvl/msg/TrainerHeartbeat" in err, err[-3000:]
    assert "a callback raised" not in err and "Traceback" not in err, err[-3000:]


def test_a_resume_commands_trains_and_judges_the_task_as_recorded(tmp_path):
    """A run resumed after the sentence rules changed keeps the task its first session recorded (command, ground,
    criterion, the trainers' command share), instead of reading the sentence again; so does a baseline that
    trains beside the run from its recorded overrides."""
    from motionvl.ros.terrain import launch_ground
    from motionvl.search.loop import recorded_training_overrides, run_task

    run_dir = tmp_path / "run"
    settings = _settings(candidates=1, iterations=1)
    _search(run_dir, settings).close()
    path = run_dir / "ledger.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    (record,) = [r for r in records if r["kind"] == "run" and r["key"] == "settings"]
    # what another rule table might have read from the sentence
    record["task_object"].update(command=[-0.3, 0.0, 0.0], terrain="rough", terrain_level=3)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    search = _search(run_dir, settings, resume=True)
    try:
        assert search.task.command == (-0.3, 0.0, 0.0)
        assert search._playback_task() == {"command": (-0.3, 0.0, 0.0), "terrain": "rough", "terrain_level": 3}
        assert "env.commands.task=[-0.3, 0.0, 0.0]" in search.train_overrides
    finally:
        search.close()
    assert "env.commands.task=[-0.3, 0.0, 0.0]" in recorded_training_overrides(run_dir)
    assert run_task(run_dir, settings).command == (-0.3, 0.0, 0.0)  # what motionvl train --resume says it runs
    assert launch_ground("", str(run_dir)) == ("rough", 3)  # train.launch.py's playback nodes on resume
    fresh = _search(tmp_path / "fresh", settings)
    try:
        assert fresh.task.command == (0.6, 0.0, 0.0), "the sentence itself still reads forward at 0.6 m/s"
        assert not any(o.startswith("env.commands.task=") for o in fresh.train_overrides)
    finally:
        fresh.close()
