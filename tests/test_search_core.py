"""The search's core pieces on their own: ledger, decision rules, dispatcher, settings and the CLI's bad input."""

from __future__ import annotations

import errno
import json
import time

import pytest

from motionvl.rewards.spec import load_reward_spec
from motionvl.rl.jobs import TrainingJob
from motionvl.search.config import GateConfig, RankingConfig, SearchConfig, load_search_config, mode_label, presets
from motionvl.search.decision import decide, failures_against, gate_failures, verdict_of
from motionvl.search.dispatch import Dispatcher, SlotState
from motionvl.search.ledger import Ledger, LedgerWriteError
from motionvl.task import make_task
from motionvl.search.lineage import describe_diff


# ----------------------------------------------------------------------------- ledger
def test_ledger_once_records_a_step_once_and_survives_a_cut_line(tmp_path):
    ledger = Ledger(tmp_path)
    calls = []
    assert ledger.once("trained", "a", lambda: calls.append(1) or {"ok": True}) == {"ok": True}
    assert ledger.once("trained", "a", lambda: calls.append(1) or {"ok": False}) == {"ok": True}
    assert calls == [1]
    with ledger.path.open("a") as f:  # a kill -9 in the middle of a write
        f.write('{"seq": 1, "t": 0, "kind": "trained", "key": "b", "ok"')
    again = Ledger(tmp_path)
    assert again.get("trained", "a") == {"ok": True} and not again.has("trained", "b")
    again.append("trained", "b", {"ok": False})
    assert [json.loads(line)["key"] for line in ledger.path.read_text().splitlines()] == ["a", "b"]


def test_ledger_full_disk_is_a_clear_error_and_keeps_what_was_written(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ledger.append("run", "settings", {"task": "walk"})
    import motionvl.search.ledger as module

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(module.os, "fsync", full)
    with pytest.raises(LedgerWriteError, match="disk is full.*--resume"):
        ledger.append("trained", "start", {"ok": True})
    monkeypatch.undo()
    reread = Ledger(tmp_path)
    assert reread.get("run", "settings") == {"task": "walk"} and not reread.has("trained", "start")


# ----------------------------------------------------------------------------- decision
def _record(cid, success=0.95, falls=0.02, task=0.9, align=0.5, fault=None, clipped=0.0):
    return {"id": cid, "evaluation": {"success_rate": success, "fell_fraction": falls, "task_score": task},
            "playback": {"fault": fault, "clipped_share": clipped},
            "feedback": {"valid": True, "alignment_score": align}}


def _judgement(preferred_first: str | None, preferred_second: str | None, valid=True):
    return {"challenger_first": {"preferred": preferred_first, "valid": valid},
            "best_first": {"preferred": preferred_second, "valid": valid}}


def test_gates_name_every_failure_and_the_llm_cannot_buy_style_with_the_walk():
    gates = GateConfig(min_success_rate=0.85, max_fall_fraction=0.15, max_success_drop=0.05, max_clipped_share=0.05)
    best = _record("start", success=0.97)
    failures = gate_failures(_record("c", success=0.9, falls=0.2, fault="fell at 3.1 s", clipped=0.1), best, gates)
    assert len(failures) == 4, failures
    assert any("below r*'s" in f for f in failures) and any("fell at 3.1 s" in f for f in failures)
    assert gate_failures(_record("c", success=0.95), best, gates) == []


def test_decision_orders_gates_ranking_then_a_self_consistent_judge():
    gates, ranking = GateConfig(), RankingConfig(task_weight=0.5, alignment_weight=0.5, margin=0.02)
    best = _record("start", align=0.5)
    ahead, tie, behind = _record("ahead", align=0.7), _record("tie", align=0.51), _record("behind", align=0.3)
    gated = _record("gated", success=0.5, align=0.9)
    failed = {"id": "failed", "failed": "the sandbox refused it: line 2: import"}
    # a clear lead wins when the judge abstains or contradicts itself
    d = decide(best, [behind, ahead, gated, failed], gates=gates, ranking=ranking, use_critic=True,
               judge=lambda c: _judgement("first", "first"))  # "first" both times: inconsistent, not counted
    assert d["winner"] == "ahead"
    assert d["verdicts"]["gated"]["outcome"] == "gated" and d["verdicts"]["failed"]["outcome"] == "failed"
    assert d["verdicts"]["behind"]["outcome"] == "lost"
    # a self-consistent preference for r* vetoes the lead
    d = decide(best, [ahead], gates=gates, ranking=ranking, use_critic=True,
               judge=lambda c: _judgement("second", "first"))
    assert d["winner"] is None and "veto" in d["verdicts"]["ahead"]["reason"]
    # a tie is won only on a self-consistent preference for the challenger
    assert decide(best, [tie], gates=gates, ranking=ranking, use_critic=True,
                  judge=lambda c: _judgement("first", "second"))["winner"] == "tie"
    assert decide(best, [tie], gates=gates, ranking=ranking, use_critic=True,
                  judge=lambda c: _judgement("first", "second", valid=False))["winner"] is None
    # without critic feedback (mode synth) the task score alone ranks and no judge is asked
    asked = []
    d = decide(best, [_record("faster", task=0.95, align=0.0)], gates=gates, ranking=ranking, use_critic=False,
               judge=lambda c: asked.append(c) or None)
    assert d["winner"] == "faster" and asked == []


def test_candidates_that_tie_on_the_score_are_ranked_by_the_critics_alignment():
    """Two challengers within the margin of each other (a straighter-kneed walk a little behind on the task score,
    as in the task suite): the one the critic finds closer to the sentence is tried against r* first; outside
    the margin the score alone ranks."""
    gates, ranking = GateConfig(), RankingConfig(task_weight=0.5, alignment_weight=0.5, margin=0.02)
    best = _record("start", task=0.995, align=0.735)
    faster = _record("faster", task=0.979, align=0.894)
    straighter = _record("straighter", task=0.966, align=0.907)
    d = decide(best, [faster, straighter], gates=gates, ranking=ranking, use_critic=True)
    assert d["winner"] == "straighter" and d["verdicts"]["faster"]["reason"] == "ranked below straighter"
    far_ahead = _record("far_ahead", task=1.0, align=0.90)
    assert decide(best, [far_ahead, _record("aligned", task=0.9, align=0.95)], gates=gates, ranking=ranking,
                  use_critic=True)["winner"] == "far_ahead"
    # without critic feedback there is no alignment to rank by
    assert decide(_record("start", task=0.9), [_record("a", task=0.99, align=0.0), _record("b", task=0.98, align=0.9)],
                  gates=gates, ranking=ranking, use_critic=False)["winner"] == "a"


def test_a_tie_the_critic_leaves_open_goes_to_the_style_the_held_out_evaluation_shows():
    """High steps, task suite (seed 0): the start lifted its swing foot 13.4 cm, a candidate 15.5 cm in the 64 held-out
    episodes with more successes and no falls, and tied on the score (0.861 vs 0.851); one playback each left the
    critic undecided ("within the noise"), so r* stayed. The evaluation's own measure of the sentence's style
    decides such a tie; it never overrides the critic's self-consistent preference, a loss in success or falls, or
    a gain under `style_tiebreak`."""
    gates, ranking = GateConfig(), RankingConfig(task_weight=0.5, alignment_weight=0.5, margin=0.02)
    style = make_task("walk forward with high steps").style_measures
    assert style == (("swing_clearance_m", "higher"),)

    def record(cid, success, falls, task, align, clearance):
        r = _record(cid, success=success, falls=falls, task=task, align=align)
        r["evaluation"]["swing_clearance_m"] = clearance
        return r

    start = record("start", 0.875, 0.0781, 0.9492, 0.7518, 0.134)
    higher = record("i1k2", 0.9375, 0.0, 0.9234, 0.7979, 0.1554)
    undecided = lambda c: _judgement(None, None)  # noqa: E731
    d = decide(start, [higher], gates=gates, ranking=ranking, use_critic=True, judge=undecided, style_measures=style)
    assert d["winner"] == "i1k2", d
    assert "swing_clearance_m 0.134 -> 0.155 (+16%) (style tiebreak)" in d["verdicts"]["i1k2"]["reason"]
    assert decide(start, [higher], gates=gates, ranking=ranking, use_critic=True, judge=undecided)["winner"] is None
    assert decide(start, [higher], gates=gates, ranking=ranking, use_critic=True, judge=lambda c: _judgement(
        "second", "first"), style_measures=style)["winner"] is None  # the critic prefers r* in both orders
    for worse in (record("fewer", 0.86, 0.0, 0.9234, 0.7979, 0.1554), record("falls", 0.9375, 0.09, 0.9234, 0.7979,
                                                                              0.1554),
                  record("barely", 0.9375, 0.0, 0.9234, 0.7979, 0.138)):
        assert decide(start, [worse], gates=gates, ranking=ranking, use_critic=True, judge=undecided,
                      style_measures=style)["winner"] is None, worse["id"]
    off = RankingConfig(task_weight=0.5, alignment_weight=0.5, margin=0.02, style_tiebreak=0.0)
    assert decide(start, [higher], gates=gates, ranking=off, use_critic=True, judge=undecided,
                  style_measures=style)["winner"] is None
    # straighter knees are lower angles; a style without a measure (an upright torso) breaks no tie
    knees = make_task("walk forward with straight knees").style_measures
    assert knees == (("knee_angle_stance_deg", "lower"),) and make_task("walk with an upright torso").style_measures == ()
    bent, straight = _record("start", task=0.95, align=0.8), _record("c", task=0.95, align=0.81)
    bent["evaluation"]["knee_angle_stance_deg"], straight["evaluation"]["knee_angle_stance_deg"] = 15.4, 12.7
    assert decide(bent, [straight], gates=gates, ranking=ranking, use_critic=True, judge=undecided,
                  style_measures=knees)["winner"] == "c"


def test_a_gate_r_star_fails_too_holds_a_challenger_back_only_where_it_is_worse():
    """A weak r* (a first walk backward: 8% success, 23% falls) cannot keep its place by failing the gates itself:
    a challenger that fails the same gates but is better on them competes; one worse on a shared gate, or failing
    a gate r* passes, is held back as before."""
    gates = GateConfig(min_success_rate=0.85, max_fall_fraction=0.15, max_success_drop=0.05, max_clipped_share=0.05)
    ranking = RankingConfig()
    weak = _record("start", success=0.08, falls=0.23, task=0.6, align=0.78)
    better = _record("better", success=0.66, falls=0.17, task=0.8, align=0.8)
    falls_more = _record("falls_more", success=0.70, falls=0.30, task=0.85, align=0.8)
    clips = _record("clips", success=0.70, falls=0.10, task=0.85, align=0.8, clipped=0.2)
    d = decide(weak, [better, falls_more, clips], gates=gates, ranking=ranking, use_critic=True)
    assert d["winner"] == "better", d
    assert d["verdicts"]["falls_more"]["outcome"] == "gated" and d["verdicts"]["falls_more"]["gates"] == [
        "falls in 30.0% of episodes > 15.0%"]
    assert d["verdicts"]["clips"]["outcome"] == "gated" and "clipped" in d["verdicts"]["clips"]["reason"]
    # a playback fault is never waived, and against an r* that passes the gates they hold as they did
    faulty = _record("faulty", success=0.7, falls=0.1, task=0.9, align=0.9, fault="joint limit")
    assert decide(_record("start", success=0.08, falls=0.23, fault="joint limit"), [faulty], gates=gates,
                  ranking=ranking, use_critic=True)["verdicts"]["faulty"]["outcome"] == "gated"
    assert decide(_record("start", success=0.97), [better], gates=gates, ranking=ranking,
                  use_critic=True)["verdicts"]["better"]["outcome"] == "gated"
    assert failures_against(better, weak, gates) == [] and len(gate_failures(better, weak, gates)) == 2


def test_a_fall_in_the_playback_counts_with_the_fall_share_against_an_r_star_that_falls_more():
    """Stairs from a composed start: r* falls in 91% of held-out episodes but stood through its one playback; a
    challenger that falls in fewer episodes (79%) and fell in its playback competes, one falling more often does
    not; against an r* within the falls gate a fall in the playback holds as before, and so does any fault that is
    not only a fall."""
    gates = GateConfig(min_success_rate=0.85, max_fall_fraction=0.15, max_success_drop=0.05, max_clipped_share=0.05)
    ranking = RankingConfig()
    from motionvl.search.playback import deployment_fault

    latched = {"reached_run": True, "faults": ["fall: base tilted 0.80 rad (falls beyond 0.8, clears below 0.4)"]}
    fall = deployment_fault(latched, None)  # the fault text a deployment-controller playback records
    weak = _record("start", success=0.05, falls=0.91, task=0.29, align=0.15)
    steadier = _record("steadier", success=0.18, falls=0.79, task=0.42, align=0.3, fault=fall)
    shakier = _record("shakier", success=0.06, falls=0.95, task=0.45, align=0.3, fault="fell at 2.40 s")
    d = decide(weak, [steadier, shakier], gates=gates, ranking=ranking, use_critic=False)
    assert d["winner"] == "steadier", d
    assert d["verdicts"]["shakier"]["outcome"] == "gated" and "fell at 2.40 s" in d["verdicts"]["shakier"]["reason"]
    both = deployment_fault({**latched, "faults": latched["faults"] + ["joint_limit: knee at 2.1 rad"]}, None)
    limits = _record("limits", success=0.18, falls=0.79, task=0.42, fault=both)
    assert decide(weak, [limits], gates=gates, ranking=ranking, use_critic=False)["winner"] is None
    sound = _record("start", success=0.97, falls=0.02)
    assert failures_against(_record("c", success=0.97, falls=0.0, fault=fall), sound, gates) == [f"playback fault: {fall}"]


def test_every_candidate_rejected_keeps_r_star_and_says_so():
    d = decide(_record("start"), [{"id": "a", "failed": "rejected"}, _record("b", falls=0.9)],
               gates=GateConfig(), ranking=RankingConfig(), use_critic=True)
    assert d["winner"] is None and "r* stays start" in d["summary"] and "rejected, failed or gated" in d["summary"]
    assert verdict_of(None) is None


# ----------------------------------------------------------------------------- dispatcher
class ScriptedSlot:
    """A trainer that follows a script: 'done' after some polls, 'stall', 'crash', or 'gone'."""

    def __init__(self, name, behaviour, polls=2):
        self.name, self.behaviour, self.polls = name, behaviour, polls
        self.job, self.count, self.stopped, self.gone = None, 0, [], False

    def start(self, job):
        self.job, self.count, self.started = job, 0, time.time()

    def poll(self):
        if self.job is None:
            return SlotState("idle")
        self.count += 1
        if self.behaviour == "stall":
            return SlotState("running", beat=self.started, iteration=3, phase="training")
        if self.count < self.polls:
            return SlotState("running", beat=time.time(), iteration=self.count, phase="training")
        job, self.job = self.job, None
        if self.behaviour == "crash":
            self.behaviour = "done"  # a crashed trainer process is replaced for the next job
            return SlotState("failed", reason="trainer process ended (killed by signal 9)")
        if self.behaviour == "gone":
            self.gone = True  # it leaves the pool of trainers, as a node that left the graph
            return SlotState("gone", reason="no heartbeat")
        return SlotState("done", outcome={"candidate_id": job.candidate_id})

    def stop(self):
        self.stopped.append(self.job.candidate_id)
        self.job = None

    def close(self):
        pass


def _jobs(*ids):
    spec = load_reward_spec()
    return [TrainingJob(candidate_id=i, spec=spec, iterations=2) for i in ids]


def test_dispatcher_fails_stalled_and_crashed_jobs_with_a_reason_and_moves_a_lost_trainers_job():
    stalled = ScriptedSlot("stalls", "stall")
    results = {r.job.candidate_id: r for r in Dispatcher(lambda: [stalled], limit_s=lambda j: 60, heartbeat_s=0.2,
                                                         poll_s=0.05, log=lambda m: None).run(_jobs("a"))}
    assert not results["a"].ok and "no progress from stalls" in results["a"].reason and stalled.stopped == ["a"]

    crashing = ScriptedSlot("crashes", "crash")
    healthy = ScriptedSlot("healthy", "done")
    results = {r.job.candidate_id: r for r in Dispatcher(lambda: [crashing, healthy], limit_s=lambda j: 60, heartbeat_s=5,
                                                         poll_s=0.01, log=lambda m: None).run(_jobs("a", "b", "c"))}
    assert not results["a"].ok and "signal 9" in results["a"].reason
    assert results["b"].ok and results["c"].ok, "the search goes on after a crash"

    lost = ScriptedSlot("lost", "gone")
    survivor = ScriptedSlot("survivor", "done", polls=5)
    pool = [lost, survivor]
    results = list(Dispatcher(lambda: [s for s in pool if not s.gone], limit_s=lambda j: 60, heartbeat_s=5, poll_s=0.01,
                              log=lambda m: None).run(_jobs("x")))
    assert len(results) == 1 and results[0].ok and results[0].trainer == "survivor"


def test_dispatcher_enforces_the_wall_clock_limit():
    slow = ScriptedSlot("slow", "done", polls=10 ** 6)
    (result,) = Dispatcher(lambda: [slow], limit_s=lambda j: 0.1, heartbeat_s=5, poll_s=0.02,
                           log=lambda m: None).run(_jobs("a"))
    assert not result.ok and "wall-clock limit" in result.reason


# ----------------------------------------------------------------------------- settings and labels
def test_presets_are_iteration_budgets_with_the_papers_k_and_n_on_gpu():
    table = presets()
    assert {"quick", "cpu", "gpu"} <= set(table)
    gpu = load_search_config("gpu")
    assert (gpu.candidates, gpu.iterations) == (10, 5)
    quick = load_search_config("quick", {"gates": {"min_success_rate": 0.9}})
    assert quick.gates.min_success_rate == 0.9 and quick.total_iterations == 300 + 2 * 3 * 60 + 150
    assert load_search_config("quick", {"ranking": {"style_tiebreak": 0.0}}).ranking.style_tiebreak == 0.0
    with pytest.raises(ValueError, match=r"ranking.style_tiebreak in \[0, 1\)"):
        load_search_config("quick", {"ranking": {"style_tiebreak": -0.05}})
    with pytest.raises(ValueError, match="unknown preset"):
        load_search_config("huge")
    with pytest.raises(ValueError, match="candidates"):
        SearchConfig.from_dict({"candidates": 0})


def test_an_offline_run_is_never_labelled_llm_or_vlm():
    assert mode_label("synth+critic", "rules", "kinematic") == "RL-Rules+Kinematic"
    assert mode_label("synth+critic", "openai", "transformers") == "RL-LLM+VLM"
    assert mode_label("synth", "replay", None) == "RL-Replay"
    assert mode_label("reference", None, None) == "RL-Base"


def test_one_definition_of_the_same_reward_counts_the_scale_and_not_the_name():
    """reward_key is what duplicates and the exported reward_spec_hash use: a rescaled reward is another reward
    (the synthesizer's old fingerprint called it the same), a renamed one or one written with the weight shorthand
    or a term's alias is not."""
    from motionvl.rewards.spec import RewardSpec, reward_key
    from motionvl.synth import term_diff

    spec = load_reward_spec().to_dict()
    assert reward_key(spec) == reward_key({**spec, "name": "other", "description": "else"})
    shorthand = json.loads(json.dumps(spec))
    shorthand["terms"]["lin_vel_z"] = spec["terms"]["lin_vel_z"]["weight"]
    assert "params" not in spec["terms"]["lin_vel_z"] and reward_key(shorthand) == reward_key(spec)
    aliased = {**spec, "terms": {("survival" if k == "alive" else k): v for k, v in spec["terms"].items()}}
    assert reward_key(aliased) == reward_key(spec) == reward_key(RewardSpec.from_dict(aliased))
    heavier = json.loads(json.dumps(spec))
    heavier["terms"]["orientation"]["weight"] = 0.6
    scaled = {**spec, "scale": 2.0}
    assert len({reward_key(spec), reward_key(heavier), reward_key(scaled), reward_key({**spec, "only_positive": True})}) == 4
    diff = term_diff(RewardSpec.from_dict(spec), RewardSpec.from_dict(scaled))
    assert diff == [{"term": "*", "change": "scale", "old": 1.0, "new": 2.0}], "a scale change shows in the diff"
    assert describe_diff(diff) == "scale 1.0->2.0"
    assert describe_diff([{"term": "orientation", "change": "weight", "old": 0.3, "new": 0.6},
                          {"term": "knee_extension", "change": "added", "old": None, "new": {"weight": 0.2}}]) == \
        "orientation 0.3->0.6, +knee_extension 0.2"


# ----------------------------------------------------------------------------- CLI bad input
@pytest.mark.parametrize("argv, message", [
    (["--task", "   "], "empty or has no words"),
    (["--task", "1234 !!"], "empty or has no words"),
    (["--task", "walk", "--synthesizer", "transformers", "--synth-model", "/no/such/dir"], "local model directory"),
    (["--task", "walk", "--critic", "openai"], "--critic-base-url"),
    (["--task", "walk", "--preset", "huge"], "unknown preset"),
    (["--resume"], "holds no search"),
    (["--task", "walk", "--no-ros", "--playback", "ros"], "--playback ros needs the ROS graph"),
    (["--task", "walk", "--robot-config", "/no/such/robot.yaml"], "robot config not found: /no/such/robot.yaml"),
])
def test_train_cli_refuses_bad_input_with_a_clear_message(tmp_path, capsys, argv, message):
    from motionvl.cli import main

    assert main(["train", *argv, "--out", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "candidates").exists(), "nothing trained"
