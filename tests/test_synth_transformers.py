"""The `transformers` synthesizer on a tiny randomly initialised causal LM built in the test: the real
load/chat-template/generate path runs, and its (garbage) answers are rejected cleanly with their reasons."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from motionvl.synth import SynthesisRequest, make_synthesizer  # noqa: E402
from motionvl.synth.context import build_prompt  # noqa: E402
from motionvl.synth.llm import repair_text  # noqa: E402
from synth_fixtures import build_tiny_causal_lm  # noqa: E402

TASK = "walk forward with straight knees"
PROMPT_CHARS = 12_000  # the budgeted prompt keeps the tiny model's forward passes short


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    request = SynthesisRequest(TASK, 0, 1).checked()
    prompt = build_prompt(request, max_prompt_chars=PROMPT_CHARS)
    corpus = [prompt.system, prompt.user, repair_text("no JSON object in the answer"),
              '{"rationale": "", "terms": {"weight": 0.5, "params": {}}} 0123456789 .,:;!?()[]{}<>-+=*/_%#@&|~^$']
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-lm"), corpus)


def test_a_tiny_random_model_runs_and_its_answers_are_rejected_cleanly(tiny_lm):
    synth = make_synthesizer("transformers", model_dir=str(tiny_lm), device="cpu", max_new_tokens=16, max_repairs=1,
                             max_prompt_chars=PROMPT_CHARS)
    assert synth.name == f"transformers:{tiny_lm.name}" and not synth.offline
    first, second = synth.propose(SynthesisRequest(TASK, 0, 2, seed=3))
    for c in (first, second):
        assert not c.ok and c.spec is None and c.attempts == 2
        assert "still refused after 2 attempts" in c.rejection
        assert c.usage["calls"] == 2 and c.usage["prompt_tokens"] > 100 and 0 < c.usage["completion_tokens"] <= 32
        assert [e["rejection"] is not None for e in c.exchanges] == [True, True]
        assert TASK in c.prompt
    assert synth.budget.calls == 4


def test_a_directory_without_a_causal_lm_is_a_clear_error(tmp_path):
    from motionvl.synth import SynthesisError

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SynthesisError, match="cannot load a causal LM"):
        make_synthesizer("transformers", model_dir=str(tmp_path))
