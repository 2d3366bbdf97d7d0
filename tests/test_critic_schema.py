"""Critic schema, parsing/repair, prompts, the re-ask protocol and the registry (no model needed)."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import dataclasses
import doctest
import json
import math

import numpy as np
import pytest

from motionvl.critic import base, parsing, prompts, schema
from motionvl.critic.base import Reply, available_critics, compare_with_reask, create_critic, critique_with_reask
from motionvl.critic.parsing import (apply_token_confidence, coerce_unit_interval, combine_confidence,
                                     extract_json_text, parse_comparison, parse_feedback, token_offsets)
from motionvl.critic.schema import (ANSWER_EXAMPLE, ANSWER_SCHEMA, COMPARISON_EXAMPLE, COMPARISON_SCHEMA,
                                    FEATURE_LABELS, QUANTITIES, Comparison, Descriptor, MotionFeedback, SchemaError,
                                    Suggestion, discretise, merge_measurements)

GOOD = {
    "descriptors": [
        {"label": "knee_flexion", "region": "knees", "value": 35, "unit": "deg", "confidence": 0.7, "note": "bent"},
        {"label": "torso_upright", "region": "torso", "value": None, "unit": None, "confidence": 0.9, "note": ""},
    ],
    "alignment_score": 0.4,
    "suggestions": [{"term": "knee_extension", "direction": "increase", "reason": "straight knees asked"}],
    "better_than_best": False,
    "unjudged": ["speed"],
}


# ----------------------------------------------------------------------------- schema

def test_schema_docstring_example_runs():
    res = doctest.testmod(schema, raise_on_error=False, verbose=False)
    assert res.attempted >= 5 and res.failed == 0


def test_vocabulary_is_consistent():
    for region, meaning in FEATURE_LABELS.values():
        assert region in schema.REGIONS and meaning
    for group in schema.EXCLUSIVE_GROUPS:
        assert all(g in FEATURE_LABELS for g in group)
    for name, q in QUANTITIES.items():
        assert q.region in schema.REGIONS
        for _, _, feat in q.rules:
            assert feat in FEATURE_LABELS, (name, feat)
    for alias, target in schema.LABEL_ALIASES.items():
        assert target in FEATURE_LABELS or target in QUANTITIES, alias
    for must in ("knees_straight", "knees_bent", "torso_upright", "torso_leaning_forward", "feet_dragging",
                 "high_foot_clearance", "asymmetric_gait", "fell", "walking_forward", "standing_still"):
        assert must in FEATURE_LABELS


@pytest.mark.parametrize("kwargs, msg", [
    (dict(region="elbows"), "region"),
    (dict(confidence=1.5), "confidence"),
    (dict(confidence=float("nan")), "confidence"),
    (dict(confidence="0.5"), "confidence"),
    (dict(value=float("inf")), "value"),
    (dict(label=""), "label"),
])
def test_descriptor_validation_names_the_field(kwargs, msg):
    args = dict(label="knees_bent", region="knees", value=None, unit=None, confidence=0.5, note="")
    args.update(kwargs)
    with pytest.raises(SchemaError, match=msg):
        Descriptor(**args)


def test_suggestion_and_feedback_validation():
    with pytest.raises(SchemaError, match="direction"):
        Suggestion("knee_extension", "more")
    with pytest.raises(SchemaError, match="alignment_score"):
        MotionFeedback(critic="x", task="t", alignment_score=2.0)
    with pytest.raises(SchemaError, match="vocabulary"):
        MotionFeedback(critic="x", task="t", features=[("knees_wobbly", 0.5)])
    with pytest.raises(SchemaError, match="better_than_best"):
        MotionFeedback(critic="x", task="t", better_than_best="yes")
    with pytest.raises(SchemaError, match="critic"):
        MotionFeedback(critic="", task="t")


def test_feedback_json_round_trip():
    d = [Descriptor(**{**x, "value": x["value"]}) for x in GOOD["descriptors"]]
    fb = MotionFeedback(critic="openai:m", task="walk", descriptors=d, features=discretise(d), alignment_score=0.4,
                        suggestions=[Suggestion(**GOOD["suggestions"][0])], better_than_best=False,
                        unjudged=["speed"], raw_text="{...}", meta={"attempts": np.int64(2)})
    text = fb.to_json()
    back = MotionFeedback.from_json(text)
    assert back.to_dict() == json.loads(text)
    assert back.features == fb.features and isinstance(back.features[0], tuple)
    assert back.meta["attempts"] == 2
    with pytest.raises(SchemaError, match="unknown field"):
        MotionFeedback.from_dict({**json.loads(text), "bogus": 1})
    with pytest.raises(SchemaError, match=r"descriptors\[0\].region"):
        bad = json.loads(text)
        bad["descriptors"][0]["region"] = "neck"
        MotionFeedback.from_dict(bad)
    with pytest.raises(SchemaError, match="not JSON"):
        MotionFeedback.from_json("{nope")


def test_invalid_feedback_constructor():
    fb = MotionFeedback.invalid("transformers:tiny", "walk", "parse error: x", raw_text="garbage", meta={"attempts": 2})
    assert not fb.valid and fb.error == "parse error: x" and fb.raw_text == "garbage" and fb.features == []


# ----------------------------------------------------------------------------- discretise / merge

def test_discretise_quantities_labels_aliases_and_groups():
    d = [
        Descriptor("knee_flexion", "knees", 0.7, "rad", 0.6),         # 40 deg -> knees_bent
        Descriptor("Straight knees", "knees", None, None, 0.5),       # alias, loses to knees_bent (0.6)
        Descriptor("torso_pitch", "torso", 20.0, "degrees", 0.8),    # -> torso_leaning_forward
        Descriptor("foot_clearance", "feet", 2.0, "cm", 0.9),        # 0.02 m -> feet_dragging
        Descriptor("forward_speed", "whole_body", 0.07, "m/s", 0.9),  # between bands -> nothing
        Descriptor("fell", "whole_body", None, None, 0.3),
        Descriptor("something odd", "arms", None, None, 0.9),         # unknown label: no feature
    ]
    f = dict(discretise(d))
    assert f == {"knees_bent": 0.6, "torso_leaning_forward": 0.8, "feet_dragging": 0.9, "fell": 0.3}
    assert discretise(d)[0][1] >= discretise(d)[-1][1]  # most confident first
    assert "fell" not in dict(discretise(d, min_confidence=0.5))


def test_merge_measurements_flags_value_contradictions():
    d = [Descriptor("knee_flexion", "knees", 35.0, "deg", 0.8),
         Descriptor("torso_pitch", "torso", 0.1, "rad", 0.7),        # 5.7 deg vs measured 4: within 7
         Descriptor("foot_clearance", "feet", 0.10, "m", 0.6),       # no measurement: untouched
         Descriptor("forward_speed", "whole_body", 0.6, "m/s", 0.9)]
    fb = MotionFeedback(critic="openai:m", task="walk", descriptors=d, features=discretise(d), alignment_score=0.5)
    out = merge_measurements(fb, {"knee_flexion": 8.0, "torso_pitch": 4.0, "forward_speed": 0.2},
                             tolerances={"forward_speed": 0.5})
    k, t, c, s = out.descriptors
    assert (k.measured_value, k.contradiction) == (8.0, True)
    assert (t.measured_value, t.contradiction) == (4.0, False)
    assert (c.measured_value, c.contradiction) == (None, False)
    assert (s.measured_value, s.contradiction) == (0.2, False)  # custom tolerance 0.5 m/s
    assert out.meta["contradictions"] == ["knee_flexion"]
    assert dict(out.features)["knees_bent"] == pytest.approx(0.8 * 0.25)
    # the input is not modified
    assert fb.descriptors[0].contradiction is False and fb.descriptors[0].measured_value is None
    tight = merge_measurements(fb, {"forward_speed": 0.2}, tolerances={"forward_speed": 0.1})
    assert tight.descriptors[3].contradiction


def test_merge_measurements_flags_label_contradictions():
    d = [Descriptor("knees_straight", "knees", None, None, 0.9, "legs look straight"),
         Descriptor("walking_forward", "whole_body", None, None, 0.8),
         Descriptor("torso_upright", "torso", None, None, 0.7)]
    fb = MotionFeedback(critic="openai:m", task="walk", descriptors=d, features=discretise(d), alignment_score=0.5)
    out = merge_measurements(fb, {"knee_flexion": 42.0, "forward_speed": 0.5})
    ks, wf, tu = out.descriptors
    assert ks.contradiction and ks.measured_value == 42.0           # measured says knees_bent
    assert not wf.contradiction and wf.measured_value == 0.5        # confirmed
    assert not tu.contradiction and tu.measured_value is None       # nothing measured
    assert dict(out.features)["knees_straight"] == pytest.approx(0.9 * 0.25)
    dropped = merge_measurements(fb, {"knee_flexion": 42.0}, contradiction_weight=0.0)
    assert "knees_straight" not in dict(dropped.features)


# ----------------------------------------------------------------------------- parsing

def test_parse_valid_answer():
    r = parse_feedback(json.dumps(GOOD), "openai:m", "walk")
    assert r.ok and r.error is None and r.repairs == []
    fb = r.feedback
    assert fb.valid and fb.critic == "openai:m" and fb.task == "walk"
    assert [d.label for d in fb.descriptors] == ["knee_flexion", "torso_upright"]
    assert dict(fb.features) == {"knees_bent": 0.7, "torso_upright": 0.9}
    assert fb.suggestions[0].direction == "increase" and fb.better_than_best is False
    assert fb.unjudged == ["speed"] and fb.raw_text == json.dumps(GOOD)


@pytest.mark.parametrize("text", ["", "   ", "I cannot see anything useful.", "\x17 walks wa\ufffd\ufffdZ",
                                  "[1, 2, 3]", "{}", '{"descriptors": "none"}', "null"])
def test_parse_garbage_gives_error_never_raises(text):
    r = parse_feedback(text, "x", "walk")
    assert not r.ok and r.feedback is None and isinstance(r.error, str) and r.error


def test_parse_fenced_prose_percentages_and_words():
    text = ("Sure! Here is my analysis:\n```json\n"
            '{"descriptors": [{"label": "Bent knees", "region": "Knee", "confidence": "85%"},'
            ' {"label": "trunk_pitch", "region": "trunk", "value": "20 degrees", "confidence": "high"},'
            ' {"label": "fell", "region": "spaceship", "confidence": "95 %"}],'
            ' "alignment_score": "30%", "suggestions": [{"term": "knee_extension", "direction": "Raise"}],'
            ' "better_than_best": "yes", "unjudged": "speed"}\n```\nLet me know if you need more.')
    r = parse_feedback(text, "x", "walk")
    assert r.ok, r.error
    fb = r.feedback
    d0, d1, d2 = fb.descriptors
    assert (d0.label, d0.region, d0.confidence) == ("knees_bent", "knees", 0.85)
    assert (d1.label, d1.region, d1.value, d1.unit, d1.confidence) == ("torso_pitch", "torso", 20.0, "degrees", 0.8)
    assert (d2.region, d2.confidence) == ("whole_body", 0.95)  # unknown region -> the label's region
    assert fb.alignment_score == 0.3 and fb.better_than_best is True and fb.unjudged == ["speed"]
    assert fb.suggestions[0].direction == "increase"
    assert dict(fb.features) == {"knees_bent": 0.85, "torso_leaning_forward": 0.8, "fell": 0.95}
    assert any("extracted" in x for x in r.repairs) and any("'30%' -> number" in x for x in r.repairs)
    assert any("unknown region" in x for x in fb.meta["repairs"])


def test_unknown_region_of_unknown_label_goes_to_whole_body():
    r = parse_feedback('{"descriptors":[{"label":"wiggly","region":"tail","confidence":0.5}],"alignment_score":0.5}',
                       "x", "t")
    assert r.ok and r.feedback.descriptors[0].region == "whole_body"


def test_parse_repairs_single_quotes_literals_trailing_commas_comments():
    text = ("{'descriptors': [{'label': 'torso_upright', 'region': 'torso', 'confidence': 0.9, "
            "'note': \"it's upright\",},],  // trailing\n 'alignment_score': 0.5, 'better_than_best': None, "
            "'unjudged': [], 'suggestions': [{'term': 'x', 'direction': 'decrease', 'reason': True,}],}")
    r = parse_feedback(text, "x", "walk")
    assert r.ok, r.error
    assert r.feedback.descriptors[0].note == "it's upright"
    assert r.feedback.better_than_best is None
    assert {"single quotes -> double quotes", "removed trailing commas", "removed comments"} <= set(r.repairs)


def test_parse_keeps_commas_and_colons_inside_strings():
    text = '{"descriptors":[{"label":"x","region":"knees","confidence":0.5,"note":"a, b: c ,] }"}],"alignment_score":0.2,}'
    r = parse_feedback(text, "x", "t")
    assert r.ok and r.feedback.descriptors[0].note == "a, b: c ,] }"


@pytest.mark.parametrize("cut, expect_ok, n_desc", [
    # truncated after the score, inside the suggestion list: the unfinished suggestion is dropped
    ('"alignment_score": 0.3, "suggestions": [{"term": "knee_ext', True, 1),
    ('"alignment_score": 0.3, "sugg', True, 1),
    ('"alignment_score": 0.3, "unjudged": ["spe', True, 1),
    # truncated before or inside the score (a cut number may be incomplete): unusable, and the error
    # says it looks truncated
    ('"alignment_score": 0.', False, 1),
    ('"alignment_score": 0.3', False, 1),
    ('"alignm', False, 1),
])
def test_parse_truncated_output(cut, expect_ok, n_desc):
    text = '{"descriptors": [{"label": "knees_bent", "region": "knees", "confidence": 0.8}], ' + cut
    r = parse_feedback(text, "x", "walk")
    assert r.ok is expect_ok, r.error
    if expect_ok:
        assert len(r.feedback.descriptors) == n_desc and "closed truncated output" in r.repairs
    else:
        assert "alignment_score" in r.error and "truncated" in r.error


def test_parse_truncated_inside_descriptor_list_drops_unfinished_element():
    text = ('{"alignment_score": 0.6, "descriptors": [{"label": "knees_bent", "region": "knees", '
            '"confidence": 0.8}, {"label": "torso_upright", "region": "tor')
    r = parse_feedback(text, "x", "walk")
    assert r.ok, r.error
    assert [d.label for d in r.feedback.descriptors] in (["knees_bent"], ["knees_bent", "torso_upright"])


@pytest.mark.parametrize("answer, path", [
    ({"descriptors": [{"label": "knees_bent", "region": "knees"}], "alignment_score": 0.5},
     "descriptors[0].confidence: missing"),
    ({"descriptors": [{"label": "knees_bent", "region": "knees", "confidence": 3000}], "alignment_score": 0.5},
     "descriptors[0].confidence"),
    ({"descriptors": [{"region": "knees", "confidence": 0.5}], "alignment_score": 0.5}, "descriptors[0].label"),
    ({"descriptors": [], "alignment_score": 0.5, "suggestions": [{"term": "x", "direction": "sideways"}]},
     "suggestions[0].direction"),
    ({"descriptors": []}, "alignment_score: missing"),
    ({"alignment_score": 0.5}, "descriptors: missing"),
    ({"descriptors": [], "alignment_score": 0.5, "better_than_best": "perhaps"}, "better_than_best"),
    ({"descriptors": ["knees bent"], "alignment_score": 0.5}, "descriptors[0]"),
])
def test_parse_errors_name_the_json_path(answer, path):
    r = parse_feedback(json.dumps(answer), "x", "walk")
    assert not r.ok and path in r.error, r.error


def test_parse_unwraps_common_wrappers():
    r = parse_feedback(json.dumps({"answer": GOOD}), "x", "walk")
    assert r.ok and len(r.feedback.descriptors) == 2
    r = parse_feedback(json.dumps([GOOD]), "x", "walk")
    assert r.ok


def test_coerce_unit_interval():
    assert coerce_unit_interval(0.25, "c") == (0.25, None)
    assert coerce_unit_interval("85%", "c")[0] == pytest.approx(0.85)
    assert coerce_unit_interval("very low", "c")[0] == 0.05
    for bad in (-0.1, 250, 85, 7.5, "7.5", "lots", True, None, float("nan")):  # never rescaled: refused
        with pytest.raises(ValueError, match="c"):
            coerce_unit_interval(bad, "c")


def test_extract_json_text_prefers_fenced_block():
    assert extract_json_text('x {"a": 1} y') == '{"a": 1}'
    assert extract_json_text('See {braces} here\n```json\n{"a": {"b": "}"}}\n```') == '{"a": {"b": "}"}}'
    assert extract_json_text('{"a": [1, 2') == '{"a": [1, 2'
    assert extract_json_text("no json") is None


def test_token_confidence_combination():
    assert combine_confidence(0.8, 1.0, 0.5) == pytest.approx(math.sqrt(0.8))
    assert combine_confidence(0.8, 0.2, 0.0) == pytest.approx(0.8)
    assert combine_confidence(0.8, 0.2, 1.0) == pytest.approx(0.2)
    text = '{"descriptors":[{"label":"knees_bent","region":"knees","confidence":0.8}],"alignment_score":0.3}'
    toks = [text[i:i + 4] for i in range(0, len(text), 4)]
    probs = [0.9] * len(toks)
    label_at = text.index("knees_bent")
    for k, (a, b) in enumerate(token_offsets(toks)):
        if a < label_at + len("knees_bent") and b > label_at:
            probs[k] = 0.25
    r = parse_feedback(text, "x", "t")
    fb = apply_token_confidence(r.feedback, r.raw_labels, token_offsets(toks), probs, weight=0.5)
    assert fb.meta["stated_confidence"] == [0.8]
    assert fb.meta["label_token_prob"][0] == pytest.approx(0.25)
    assert fb.descriptors[0].confidence == pytest.approx(math.sqrt(0.8 * 0.25), abs=1e-5)
    assert dict(fb.features)["knees_bent"] == pytest.approx(fb.descriptors[0].confidence)


# ----------------------------------------------------------------------------- the answer schemas

def test_the_prompts_example_answers_parse():
    critique_system = prompts.system_prompt()
    assert json.dumps(ANSWER_EXAMPLE) in critique_system
    assert json.dumps(ANSWER_SCHEMA, separators=(",", ":")) in critique_system
    r = parse_feedback(json.dumps(ANSWER_EXAMPLE), "x", "walk with straight knees")
    assert r.ok, r.error
    assert [d.label for d in r.feedback.descriptors] == [d["label"] for d in ANSWER_EXAMPLE["descriptors"]]
    assert r.feedback.alignment_score == ANSWER_EXAMPLE["alignment_score"] and r.repairs == []
    compare_system = prompts.comparison_system_prompt()
    assert json.dumps(COMPARISON_EXAMPLE) in compare_system
    assert json.dumps(COMPARISON_SCHEMA, separators=(",", ":")) in compare_system
    c = parse_comparison(json.dumps(COMPARISON_EXAMPLE), "x", "walk")
    assert c.ok, c.error
    assert (c.comparison.preferred, c.comparison.confidence, c.comparison.reason) == (
        COMPARISON_EXAMPLE["preferred"], COMPARISON_EXAMPLE["confidence"], COMPARISON_EXAMPLE["reason"])


def _fields(cls) -> set:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("answer_schema, example, parse, cls", [
    (ANSWER_SCHEMA, ANSWER_EXAMPLE, lambda text: parse_feedback(text, "x", "t"), MotionFeedback),
    (COMPARISON_SCHEMA, COMPARISON_EXAMPLE, lambda text: parse_comparison(text, "x", "t"), Comparison),
])
def test_answer_schemas_agree_with_the_parser_and_the_dataclasses(answer_schema, example, parse, cls):
    properties = set(answer_schema["properties"])
    assert properties <= _fields(cls) and set(example) <= properties
    for key in properties:
        rest = {k: v for k, v in example.items() if k != key}
        r = parse(json.dumps(rest))
        if key in answer_schema["required"]:
            assert not r.ok and r.error.startswith(f"{key}:"), (key, r.error)
        else:
            assert r.ok, (key, r.error)


def test_descriptor_and_suggestion_items_are_the_dataclasses_model_written_fields():
    items = ANSWER_SCHEMA["properties"]
    assert set(items["descriptors"]["items"]["properties"]) == _fields(Descriptor) - {"measured_value", "contradiction"}
    assert set(items["suggestions"]["items"]["properties"]) == _fields(Suggestion)
    assert items["descriptors"]["items"]["properties"]["region"]["enum"] == list(schema.REGIONS)
    assert items["suggestions"]["items"]["properties"]["direction"]["enum"] == list(schema.DIRECTIONS)
    assert COMPARISON_SCHEMA["properties"]["preferred"]["enum"] == [*schema.PREFERENCES, schema.ABSTAIN]


@pytest.mark.parametrize("text, preferred, confidence", [
    ('{"preferred": "first", "confidence": 0.8, "reason": "straighter knees"}', "first", 0.8),
    ('```json\n{"preferred": "Second", "confidence": "70%"}\n```', "second", 0.7),
    ('{"preferred": "neither", "confidence": 0.6, "reason": "they look alike"}', None, 0.6),
    ('{"preferred": null, "confidence": 0.5}', None, 0.5),
    ("{'preferred': 'tie', 'confidence': 1}", None, 1.0),
])
def test_parse_comparison(text, preferred, confidence):
    r = parse_comparison(text, "vlm", "walk")
    assert r.ok, r.error
    assert r.comparison.preferred == preferred and r.comparison.confidence == pytest.approx(confidence)
    assert r.comparison.valid and r.comparison.raw_text == text and r.comparison.critic == "vlm"


@pytest.mark.parametrize("text, error", [
    ("The first rollout is clearly better; first, first, first.", "no JSON object found"),
    ('{"preferred": "the first rollout", "confidence": 0.9}', "preferred: 'the first rollout' is not one of"),
    ('{"verdict": "first", "confidence": 0.9, "reason": "first is better"}', "preferred: missing"),
    ('{"preferred": true, "confidence": 0.9}', "preferred: expected one of"),
    ('{"preferred": "second", "reason": "second"}', "confidence: missing"),
    ('{"preferred": "second", "confidence": 7.5e3}', "confidence"),
])
def test_a_word_in_free_text_never_decides_a_comparison(text, error):
    r = parse_comparison(text, "vlm", "walk")
    assert not r.ok and error in r.error


def test_comparison_round_trip_mirror_and_validation():
    c = Comparison("first", 0.8, "straighter knees", meta={"scores": [0.9, 0.4]}, critic="kinematic", task="walk")
    assert Comparison.from_json(c.to_json()) == c
    assert c.mirrored().preferred == "second" and c.mirrored().mirrored() == c
    assert Comparison(None, 0.6, "alike").mirrored().preferred is None
    with pytest.raises(SchemaError, match="preferred"):
        Comparison("left", 0.5, "")
    with pytest.raises(SchemaError, match="invalid comparison prefers nothing"):
        Comparison("first", 0.5, "", valid=False)
    with pytest.raises(SchemaError, match="confidence"):
        Comparison("first", 1.5, "")
    bad = Comparison.invalid("vlm", "walk", "no answer")
    assert not bad.valid and bad.preferred is None and bad.error == "no answer"


# ----------------------------------------------------------------------------- re-ask protocol

class ScriptedBackend:
    """A plain backend function with scripted answers (the protocol unit, no model involved)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[list[tuple[str, str]]] = []

    def __call__(self, followups):
        self.calls.append(followups)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return Reply(a, meta={"n": len(self.calls)})


def test_reask_once_then_valid():
    be = ScriptedBackend("I think the robot walked.", json.dumps(GOOD))
    fb = critique_with_reask(be, "x", "walk")
    assert fb.valid and fb.meta["attempts"] == 2 and fb.meta["reasked"]
    assert be.calls[0] == []
    (r1, t1), (r2, t2) = be.calls[1]
    assert (r1, t1) == ("assistant", "I think the robot walked.")
    assert r2 == "user" and "no JSON object found" in t2 and "ONLY one valid JSON object" in t2
    assert "parse_error" in fb.meta["attempt_log"][0]


def test_reask_exactly_once_then_invalid():
    be = ScriptedBackend("garbage", "more garbage", json.dumps(GOOD))
    fb = critique_with_reask(be, "x", "walk")
    assert not fb.valid and len(be.calls) == 2 and fb.meta["attempts"] == 2
    assert fb.error.startswith("unusable answer after 2 attempt(s)") and "parse error" in fb.error
    assert fb.raw_text == "more garbage" and fb.features == [] and fb.descriptors == []


def test_no_reask_when_disabled_and_backend_errors_are_contained():
    be = ScriptedBackend("garbage", json.dumps(GOOD))
    assert critique_with_reask(be, "x", "walk", reask=False).meta["attempts"] == 1
    be = ScriptedBackend(RuntimeError("CUDA out of memory"))
    fb = critique_with_reask(be, "x", "walk")
    assert not fb.valid and "backend error: RuntimeError: CUDA out of memory" in fb.error and len(be.calls) == 1
    be = ScriptedBackend("garbage", ConnectionError("server went away"))
    fb = critique_with_reask(be, "x", "walk")
    assert not fb.valid and "server went away" in fb.error and fb.raw_text == "garbage"


def test_compare_reasks_once_then_valid_or_invalid():
    answer = json.dumps({"preferred": "second", "confidence": 0.9, "reason": "knees straighter"})
    be = ScriptedBackend("The second one, definitely.", answer)
    c = compare_with_reask(be, "vlm", "walk")
    assert c.valid and c.preferred == "second" and c.meta["attempts"] == 2 and c.meta["reasked"]
    assert be.calls[1][0] == ("assistant", "The second one, definitely.")
    assert "could not be used: no JSON object found" in be.calls[1][1][1]
    be = ScriptedBackend("second", '{"preferred": "2nd"}', answer)
    c = compare_with_reask(be, "vlm", "walk")
    assert not c.valid and c.preferred is None and len(be.calls) == 2
    assert c.error.startswith("unusable answer after 2 attempt(s)") and c.raw_text == '{"preferred": "2nd"}'
    c = compare_with_reask(ScriptedBackend(TimeoutError("read timed out")), "vlm", "walk")
    assert not c.valid and "backend error: TimeoutError" in c.error


# ----------------------------------------------------------------------------- prompts

def _frames(n, h=48, w=64):
    rng = np.random.default_rng(1)
    return [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in range(n)]


def test_select_frames_every_tenth_of_a_second():
    frames = _frames(101)
    times = [k * 0.02 for k in range(101)]  # 50 Hz for 2 s
    f, t = prompts.select_frames(frames, times, period_s=0.1, max_frames=None)
    assert len(f) == 21 and t[0] == 0.0 and np.allclose(np.diff(t), 0.1)
    f, t = prompts.select_frames(frames, times, period_s=0.1, max_frames=8)
    assert len(f) == 8 and t[0] == 0.0 and t[-1] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="times"):
        prompts.select_frames(frames, times[:-1])
    with pytest.raises(ValueError, match="no frames"):
        prompts.select_frames([], [])
    with pytest.raises(ValueError, match="RGB"):
        prompts.select_frames([np.zeros((4, 4, 5), np.uint8)], [0.0])


def test_frames_prompt_is_region_aware_with_temporal_cues():
    p = prompts.build_prompt(_frames(4), [0.0, 0.1, 0.2, 0.3], "walk forward with straight knees",
                             previous_best="walked with bent knees and a forward lean")
    assert len(p.images) == 4 and p.times == [0.0, 0.1, 0.2, 0.3]
    text = p.text
    for region in ("knees", "ankles", "hips", "torso"):
        assert f"- {region}:" in text
    assert "Frame 0 at t=0.00 s" in text and "Frame 3 at t=0.30 s, follows frame 2 (+0.10 s)" in text
    assert text.index("Frame 1 at") < text.index("Frame 2 at")
    assert "walk forward with straight knees" in text
    assert "walked with bent knees" in text and '"better_than_best" to true or false' in text
    assert '"descriptors"' in p.system and "knees_straight" in p.system and "knee_flexion" in p.system
    # parts alternate caption -> image
    kinds = [x.kind for x in p.parts]
    assert kinds.count("image") == 4 and kinds[kinds.index("image") - 1] == "text"
    no_best = prompts.build_prompt(_frames(2), [0.0, 0.1], "walk")
    assert "set \"better_than_best\" to null" in no_best.text


def test_the_best_motion_so_far_is_quoted_as_text():
    fb = MotionFeedback(critic="kinematic", task="walk", alignment_score=0.42, features=[("knees_bent", 0.9)],
                        descriptors=[Descriptor("knee_flexion", "knees", 31.0, "deg", 0.9, "in stance")])
    described = prompts.previous_best_text(fb)
    assert described.startswith("alignment score 0.42") and 'knee_flexion 31 deg: "in stance"' in described
    assert prompts.previous_best_text(fb.to_dict()) == prompts.previous_best_text(fb.to_json()) == described
    assert prompts.previous_best_text("it walked crouched") == "it walked crouched"
    assert prompts.previous_best_text(None) is None
    p = prompts.build_prompt(_frames(2), [0.0, 0.1], "walk", previous_best=described)
    assert described in p.text


def test_contact_sheet_prompt():
    frames = _frames(6, 48, 64)
    p = prompts.build_prompt(frames, [0.1 * k for k in range(6)], "walk",
                             options=prompts.FrameOptions(contact_sheet=True, sheet_cols=3, tile_longest=None))
    assert len(p.images) == 1
    sheet = p.images[0]
    assert sheet.dtype == np.uint8 and sheet.shape == (2 * (48 + 2) + 2, 3 * (64 + 2) + 2, 3)
    assert "grid of 3 columns" in p.text and "Frame 5 at t=0.50 s, follows frame 4" in p.text
    # tiles keep the frames' pixels outside the caption box
    assert np.array_equal(sheet[2 + 30:2 + 48, 2:2 + 64], frames[0][30:48])


# ----------------------------------------------------------------------------- registry

def test_registry(tmp_path):
    names = available_critics()
    assert {"kinematic", "transformers", "openai"} <= set(names)
    c = create_critic("openai:some-vlm", base_url="http://127.0.0.1:9/v1", max_retries=0)
    assert c.name == "openai:some-vlm" and isinstance(c, base.Critic)
    with pytest.raises(KeyError, match="unknown critic"):
        create_critic("nonsense")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        create_critic(f"transformers:{tmp_path / 'missing'}")

    @base.register_critic("echo-test", doc="test")
    class Echo:
        name = "echo"

        def __init__(self, **kw):
            self.kw = kw

        def critique(self, frames, times, task, previous_best=None, **kwargs):
            return MotionFeedback(critic=self.name, task=task)

        def compare(self, first, second, task):
            return Comparison(None, 1.0, "", critic=self.name, task=task)

    try:
        e = create_critic("echo-test", x=1)
        assert e.kw == {"x": 1} and isinstance(e, base.Critic)
        with pytest.raises(ValueError, match="takes no argument"):
            create_critic("echo-test:arg")
    finally:
        base._REGISTRY.pop("echo-test")


def test_parsing_module_never_raises_on_random_bytes():
    rng = np.random.default_rng(0)
    alphabet = list('{}[]":,\'0123456789.abcdeflnrstu -%\n')
    for _ in range(300):
        s = "".join(rng.choice(alphabet, size=int(rng.integers(0, 80))))
        r = parsing.parse_feedback(s, "x", "t")
        assert r.ok or isinstance(r.error, str)
