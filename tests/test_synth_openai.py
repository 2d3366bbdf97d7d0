"""The `openai` synthesizer against a real HTTP server on loopback serving recorded answers (a fixture, not a
model): repairs, sandbox refusals, garbage, truncation, refused JSON-schema requests, an endpoint that fails,
the call cap, and a replay of the recorded run without the server."""

from __future__ import annotations

import json

import pytest

from motionvl.rewards.spec import load_reward_spec
from motionvl.synth import (SynthesisCapReached, SynthesisError, SynthesisRequest, append_record, make_synthesizer,
                            read_synthesis_records, synthesis_record, usage_totals)
from synth_fixtures import RecordedAnswerServer, answer, status

TASK = "walk forward with straight knees"


def spec_text(knee_weight=0.6, *, extra_terms=None, code=None, fence=None, rationale="add a stance-knee term") -> str:
    spec = load_reward_spec().to_dict()
    spec["terms"]["knee_extension"] = {"weight": knee_weight, "params": {"max_angle": 0.2}}
    spec["terms"].update(extra_terms or {})
    if code:
        spec["code"] = code
    body = json.dumps({"rationale": rationale, **spec})
    return f"Here is the reward:\n```{fence}\n{body}\n```\nGood luck." if fence else body


UNSAFE_CODE = "import os\n\ndef _reward_sneaky(state):\n    return np.ones(state.num_envs)\n"
SAFE_CODE = ("def _reward_upright_knees(state):\n"
             "    return np.exp(-np.square(state.joint_pos[:, 3] - 0.1) / 0.04)\n")


def synth(server, **kw):
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 10.0)
    return make_synthesizer("openai", base_url=server.url, model="recorded-llm", **kw)


def request(k=1, **kw):
    return SynthesisRequest(TASK, kw.pop("iteration", 0), k, **kw)


def test_a_valid_answer_and_the_request_it_answers(monkeypatch):
    monkeypatch.delenv("MOTIONVL_OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with RecordedAnswerServer([answer(spec_text())]) as server:
        candidates = synth(server, price_prompt_per_mtok=2.0, price_completion_per_mtok=10.0).propose(request(seed=5))
    c = candidates[0]
    assert c.ok, c.rejection
    assert c.spec.term("knee_extension").weight == 0.6 and c.rationale == "add a stance-knee term"
    assert [(e["term"], e["change"]) for e in c.edits] == [("knee_extension", "added")]
    assert c.attempts == 1 and c.usage["calls"] == 1 and c.usage["prompt_tokens"] == 1200
    assert c.usage["cost"] == pytest.approx((1200 * 2.0 + 80 * 10.0) / 1e6)
    sent = server.requests[0]
    assert sent["temperature"] == 0.3 and sent["model"] == "recorded-llm" and isinstance(sent["seed"], int)
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["rationale", "terms"]
    system, user = sent["messages"][0]["content"], sent["messages"][1]["content"]
    assert "conservative, focused edits" in system
    for part in (TASK, "mvl_biped", "knee_extension(min_angle=0.0", "state.projected_gravity", "RL-Base"):
        assert part in user, part


def test_rejections_go_back_for_repair_and_the_round_carries_on():
    recording = [
        answer(spec_text(extra_terms={"knee_straightness": {"weight": 0.5}})),  # unknown term -> repaired
        answer(spec_text(fence="json")),
        answer(spec_text(0.8, code=UNSAFE_CODE, extra_terms={"sneaky": {"weight": 0.2, "source": "generated"}})),
        answer(spec_text(0.8, code=UNSAFE_CODE, extra_terms={"sneaky": {"weight": 0.2, "source": "generated"}})),
        answer(spec_text(0.9, code=SAFE_CODE, extra_terms={"upright_knees": {"weight": 0.3, "source": "generated"}})),
    ]
    with RecordedAnswerServer(recording) as server:
        first, refused, third = synth(server, max_repairs=1).propose(request(k=3))
    assert first.ok and first.attempts == 2 and first.usage["calls"] == 2
    repair = server.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": recording[0][1]}
    assert "unknown library term 'knee_straightness'" in repair[-1]["content"]
    assert [e["rejection"] is None for e in first.exchanges] == [False, True]
    assert not refused.ok and refused.spec is None and refused.attempts == 2
    assert "import" in refused.rejection and "still refused after 2 attempts" in refused.rejection
    assert third.ok and third.spec.term("upright_knees").source == "generated"
    # the third was told what the first changed, so it proposes something else
    assert "#0: added knee_extension" in server.requests[4]["messages"][1]["content"]


@pytest.mark.parametrize("said, finish, reason", [
    ("I am sorry, I cannot write rewards.", "stop", "no JSON object in the answer"),
    ('{"rationale": "x", "terms": {"tracking_lin_vel": {"weight": 1.0}, "knee_ext', "length", "cut off at the token limit"),
    ("```json\n" + spec_text()[:300], "stop", "not closed"),
    ('{"rationale": "weights", "terms": {"knee_extension": {"weight": 1.7}}}', "stop", "weight 1.7 outside [0, 1]"),
    (spec_text().replace('"knee_extension"', '"alive2"'), "stop", "unknown library term 'alive2'"),
])
def test_garbage_and_truncated_answers_are_rejected_with_their_reason(said, finish, reason):
    with RecordedAnswerServer([answer(said, finish), answer(spec_text(), "stop")]) as server:
        candidate = synth(server, max_repairs=0).propose(request(k=1))[0]
    assert not candidate.ok and reason in candidate.rejection and candidate.attempts == 1
    assert candidate.response == said


def test_an_answer_repeating_the_parent_or_a_sibling_is_sent_back():
    parent = load_reward_spec()
    same_as_parent = json.dumps({"rationale": "no change", **parent.to_dict()})
    with RecordedAnswerServer([answer(spec_text()), answer(spec_text()), answer(same_as_parent),
                               answer(spec_text(0.9))]) as server:
        first, second = synth(server).propose(request(k=2, iteration=1, parent=parent))
    assert first.ok and second.ok and second.attempts == 3
    assert "repeats candidate #0" in server.requests[2]["messages"][-1]["content"]
    assert "identical to r*" in server.requests[3]["messages"][-1]["content"]


def test_an_answer_repeating_a_candidate_tried_before_is_sent_back():
    tried_spec = json.loads(spec_text())
    tried = [{"id": "i1k2", "parent": "start", "edits": [], "terms": tried_spec["terms"], "outcome": "gated",
              "reason": "success rate 78.1% < 85.0%"}]
    with RecordedAnswerServer([answer(spec_text()), answer(spec_text(0.9))]) as server:
        candidate = synth(server).propose(request(k=1, iteration=1, parent=load_reward_spec(), tried=tried))[0]
    assert candidate.ok and candidate.attempts == 2 and candidate.spec.term("knee_extension").weight == 0.9
    assert "i1k2 (parent start)" in server.requests[0]["messages"][1]["content"], "the prompt shows what was tried"
    assert "repeats i1k2, tried before (gated)" in server.requests[1]["messages"][-1]["content"]


def test_a_server_that_refuses_json_schema_is_asked_without_it():
    with RecordedAnswerServer([status(400, "unsupported parameter: response_format"), answer(spec_text(fence="json")),
                               answer(spec_text(0.9, fence="yaml"))]) as server:
        s = synth(server)
        candidates = s.propose(request(k=2))
    assert [c.ok for c in candidates] == [True, True]
    assert "response_format" in server.requests[0] and all("response_format" not in r for r in server.requests[1:])
    assert s.describe()["response_format"] == "none (refused by the server)"
    with RecordedAnswerServer([status(422, "unknown field: seed"), answer(spec_text())]) as server:
        fixed = synth(server, response_format="json_object").propose(request())[0]
    assert fixed.rejection.startswith("model call failed: HTTP 422")  # a fixed choice: the refusal fails the call
    with RecordedAnswerServer([status(422, "unknown field: seed"), answer(spec_text())]) as server:
        s = synth(server)
        assert s.propose(request())[0].ok and "seed" in server.requests[0] and "seed" not in server.requests[1]
        assert server.requests[1]["response_format"]["type"] == "json_schema" and s.describe()["seed"] is False


def test_an_endpoint_that_keeps_failing_rejects_the_round_without_raising():
    with RecordedAnswerServer([status(503)] * 3) as server:
        candidates = synth(server, max_retries=1).propose(request(k=3))
    assert len(server.requests) == 2  # one call, retried once; the rest of the round not attempted
    assert candidates[0].rejection.startswith("model call failed: HTTP 503")
    assert "gave up after 2 attempts" in candidates[0].rejection
    assert all(c.rejection.startswith("not attempted: model call failed") for c in candidates[1:])
    unreachable = make_synthesizer("openai", base_url=server.url, model="m", max_retries=0, timeout_s=2.0)
    assert "cannot reach" in unreachable.propose(request())[0].rejection  # the server is gone now


def test_the_call_cap_stops_a_round_then_refuses_the_next():
    with RecordedAnswerServer([answer(spec_text(w)) for w in (0.5, 0.6, 0.7)]) as server:
        s = synth(server, max_calls=2)
        candidates = s.propose(request(k=3))
        assert [c.ok for c in candidates] == [True, True, False]
        assert candidates[2].cap_reached and candidates[2].rejection == "cap reached: 2 of 2 model calls used"
        with pytest.raises(SynthesisCapReached, match="2 of 2 model calls"):
            s.propose(request(k=1, iteration=1))
    tokens = make_synthesizer("openai", base_url=server.url, model="m", max_tokens=1000)
    tokens.budget.restore(**usage_totals([{"usage": {"calls": 1, "prompt_tokens": 900, "completion_tokens": 100}}]))
    with pytest.raises(SynthesisCapReached, match="1000 of 1000 tokens"):
        tokens.propose(request())


def test_a_recorded_run_replays_without_the_server(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    first_round = request(k=2)
    with RecordedAnswerServer([answer("garbage"), answer(spec_text()), answer(spec_text(0.9))]) as server:
        s = synth(server)
        recorded = s.propose(first_round)
        append_record(ledger, synthesis_record(first_round, recorded, s))
    ledger.write_text(ledger.read_text() + '{"kind": "synthesis", "request": {"itera')  # a line cut by a crash
    records = read_synthesis_records(ledger)
    assert len(records) == 1 and records[0]["synthesizer"]["backend"] == "openai:recorded-llm"
    assert records[0]["usage"]["calls"] == 3 and records[0]["candidates"][0]["exchanges"][0]["response"] == "garbage"
    replay = make_synthesizer("replay", ledger=ledger)
    replayed = replay.propose(first_round)
    assert replay.offline and replay.describe()["recorded_backends"] == ["openai:recorded-llm"]
    assert [c.spec for c in replayed] == [c.spec for c in recorded] and all(c.usage["calls"] == 0 for c in replayed)
    with pytest.raises(SynthesisError, match="no unused recorded synthesis for iteration 0"):
        replay.propose(first_round)
