"""The generated-reward sandbox: every hostile candidate is rejected with a precise message and no
side effect; good candidates pass and compute the right numbers; the CLI's exit codes.

The corpus files carry their own expectations: `# expect: <rule>`, `# stage: static|run` (which
layer must catch it) and a `# <- rejected here` marker on the line the message must name.
`# live: <path>` marks payloads that are run unsandboxed as a positive control, proving that the
no-side-effect assertions would notice the attack if it got through.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from motionvl.rewards.sandbox import namespace as safe_namespace
from motionvl.rewards.sandbox import (
    STATE_ATTRS,
    RewardCodeError,
    RewardTerm,
    check_reward_code,
    compile_reward_code,
    evaluate_term,
    random_reward_state,
)
from motionvl.rewards.state import STATE_API_DOC, RewardState

DATA = Path(__file__).parent / "data"
HOSTILE = sorted((DATA / "hostile_rewards").glob("*.py"))
GOOD = sorted((DATA / "good_rewards").glob("*.py"))
SRC = Path(__file__).resolve().parents[1] / "src"
TIMEOUT_S = 5.0
MARK = "# <- rejected here"
PROBLEM_RE = re.compile(r"^line \d+: [a-z][a-z-]*: \S.{10,}$")
SENTINEL_RE = re.compile(r"(/tmp/motionvl_sandbox_[\w.]+|pwned[\w.]*)")


def meta(path: Path) -> dict:
    source = path.read_text()
    header = dict(re.findall(r"^# (attack|expect|stage|live): (.+)$", source, re.M))
    marked = [i for i, line in enumerate(source.splitlines(), 1) if MARK in line]
    return {"source": source, "marked": marked, **header}


ABS_SENTINELS = sorted({Path(s) for p in HOSTILE for s in SENTINEL_RE.findall(p.read_text()) if s.startswith("/")})
LIVE = [p for p in HOSTILE if "live" in meta(p)]


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture
def jail(tmp_path, monkeypatch):
    """An empty working directory; absolute sentinels cleared before and after."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for sentinel in ABS_SENTINELS:
        sentinel.unlink(missing_ok=True)
    yield cwd
    for sentinel in ABS_SENTINELS:
        sentinel.unlink(missing_ok=True)


def assert_no_side_effects(jail: Path):
    assert sorted(p.name for p in jail.iterdir()) == []
    assert [p for p in ABS_SENTINELS if p.exists()] == []
    assert psutil.Process().children(recursive=True) == []


# -- the hostile corpus --------------------------------------------------------------------------
def test_corpus_is_complete_and_well_formed():
    assert len(HOSTILE) >= 70 and len(GOOD) >= 4
    rules = set()
    for path in HOSTILE:
        m = meta(path)
        assert {"attack", "expect", "stage"} <= m.keys(), path.name
        assert m["stage"] in ("static", "run") and len(m["marked"]) == 1, path.name
        rules.add(m["expect"])
    must_cover = {"name", "import", "np-name", "private-attribute", "method", "attribute", "while-loop",
                  "recursion", "lambda", "repetition", "power", "array-size", "int-size", "sequence-size",
                  "non-finite", "shape", "syntax", "no-terms", "keyword", "assignment", "try", "loop",
                  "too-much-work", "string-format", "f-string", "index", "nesting"}
    assert must_cover <= rules, must_cover - rules
    assert {m["stage"] for m in map(meta, HOSTILE)} == {"static", "run"}
    assert len(LIVE) >= 6 and ABS_SENTINELS


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p.stem)
def test_hostile_candidate_is_rejected_without_side_effects(path, jail):
    m = meta(path)
    rss_before = max_rss_mb()
    # Each candidate must be caught by the rule its corpus file names (asserted below), not by the
    # check's time limit (a "timeout" problem), which says more than the wall time it took.
    with pytest.raises(RewardCodeError) as info:
        check_reward_code(m["source"], timeout_s=TIMEOUT_S)

    problems = info.value.problems
    assert problems and all(PROBLEM_RE.match(p) for p in problems), problems
    expected = f"line {m['marked'][0]}: {m['expect']}:"
    assert any(p.startswith(expected) for p in problems), (expected, problems)
    # The right layer caught it: static rules before any execution, or the guarded test run.
    if m["stage"] == "static":
        with pytest.raises(RewardCodeError, match=re.escape(expected)):
            compile_reward_code(m["source"])
    else:
        assert compile_reward_code(m["source"]), "static checks accept it; only running it exposes the problem"

    assert_no_side_effects(jail)
    assert max_rss_mb() - rss_before < 100


RUN_UNSANDBOXED = """
import sys, numpy
from motionvl.rewards.sandbox import random_reward_state
namespace = {"np": numpy}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), namespace)
state = random_reward_state(4, numpy.random.default_rng(0))
for name, fn in list(namespace.items()):
    if name.startswith(("_reward_", "_cost_")):
        fn(state)
"""


@pytest.mark.parametrize("path", LIVE, ids=lambda p: p.stem)
def test_live_payload_really_has_an_effect_without_the_sandbox(path, jail):
    """Positive control: as plain Python the payload does create its sentinel, so the
    no-side-effect checks above would catch it had the sandbox let it run."""
    sentinel = Path(meta(path)["live"])
    target = sentinel if sentinel.is_absolute() else jail / sentinel
    subprocess.run([sys.executable, "-c", RUN_UNSANDBOXED, str(path)], cwd=jail, check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True)
    assert target.exists()
    target.unlink()


# -- good candidates ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_candidate_passes_and_leaves_state_untouched(path):
    terms = check_reward_code(path.read_text())
    assert terms
    state = random_reward_state(256, np.random.default_rng(3))
    before = {f.name: np.copy(getattr(state, f.name)) for f in dataclasses.fields(state)}
    for name, term in terms.items():
        assert isinstance(term, RewardTerm) and term.name == name
        assert term.source_name == f"_{'reward' if term.sign > 0 else 'cost'}_{name}"
        out = evaluate_term(term, state)
        assert out.shape == (256,) and out.dtype == np.float64
        assert np.all((out >= 0.0) & (out <= 1.0)), name  # these terms are normalised by design
        assert np.ptp(out) > 0 or name in ("fell", "fall", "body_contact"), name  # not constant
    for field, value in before.items():
        np.testing.assert_array_equal(getattr(state, field), value, err_msg=field)


def hand_state() -> RewardState:
    base = random_reward_state(3, np.random.default_rng(1))
    joint_pos = np.zeros((3, 12))
    joint_pos[:, [3, 9]] = [[0.3, 0.3], [0.0, 0.0], [0.6, 0.0]]  # knees
    return dataclasses.replace(
        base,
        base_lin_vel=np.array([[0.5, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.2, 0.0]]),
        base_ang_vel=np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.5]]),
        command=np.array([[0.5, 0.0, 0.0], [0.5, 0.0, 0.5], [0.5, 0.0, -0.5]]),
        projected_gravity=np.array([[0.0, 0.0, -1.0], [0.6, 0.0, -0.8], [0.0, 1.0, 0.0]]),
        terminated=np.array([False, True, False]),
        gait_phase=np.array([0.2, 0.7, 0.2]),
        foot_contact=np.array([[True, False], [False, True], [False, True]]),
        joint_pos=joint_pos,
    )


def test_good_terms_compute_hand_checked_numbers():
    state = hand_state()
    tracking = compile_reward_code((DATA / "good_rewards" / "tracking.py").read_text())
    vx_err = np.array([0.0, 0.5, 0.5]) ** 2
    np.testing.assert_allclose(evaluate_term(tracking["track_forward_speed"], state), np.exp(-vx_err / 0.25))
    np.testing.assert_allclose(evaluate_term(tracking["track_yaw_rate"], state), np.exp(-np.array([0.0, 0.0, 1.0]) / 0.5))
    np.testing.assert_allclose(evaluate_term(tracking["tilt"], state), [0.0, 0.6, 1.0])
    np.testing.assert_array_equal(evaluate_term(tracking["fall"], state), [0.0, 1.0, 0.0])
    assert (tracking["track_forward_speed"].sign, tracking["fall"].sign) == (1, -1)

    gait = compile_reward_code((DATA / "good_rewards" / "gait.py").read_text())
    np.testing.assert_allclose(evaluate_term(gait["contact_matches_phase"], state), [1.0, 1.0, 0.0])
    posture = compile_reward_code((DATA / "good_rewards" / "posture.py").read_text())
    np.testing.assert_allclose(evaluate_term(posture["straight_knees"], state), np.exp(-np.array([0.18, 0.0, 0.36]) / 0.3))


KITCHEN_SINK = '''"""Everything a reasonable LLM might write; none of it may be rejected."""
SIGMA: float = 0.25
WEIGHTS = (0.5, 0.3, 0.2)
TARGET = np.pi / 8


def weighted_vel(state, scale=1.0):
    """Docstrings and defaults are fine."""
    total = 0.0
    for i, w in enumerate(WEIGHTS):
        total += w * np.abs(state.base_lin_vel[:, i])
    return total * scale


def _reward_kitchen_sink(state: RewardState) -> np.ndarray:
    left, right = state.foot_contact[:, 0], state.foot_contact[:, -1]
    both = np.logical_and(left, right).astype(float)
    pitch = np.arctan2(state.projected_gravity[:, 0], -state.projected_gravity[:, 2])
    knees = sum(state.joint_pos[:, i] for i, n in enumerate(state.joint_names) if "knee" in n)
    swing = [state.foot_air_time[:, k] for k in range(2)]
    pair = np.stack(swing, axis=1).max(axis=1)
    lo, hi = -1.0, max(1.0, SIGMA)
    shaped = np.exp(-np.square(pitch - TARGET) / SIGMA) if state.num_envs > 0 else 0.0
    x = state.joint_pos[:, :2].sum(axis=-1).clip(lo, hi) ** 2
    return (shaped + 0.0 * (both + knees + pair + x + weighted_vel(state))) * np.ones_like(state.base_height)


def _cost_calls_a_term(state):
    return 1.0 - _reward_kitchen_sink(state)
'''


def test_reasonable_code_is_not_rejected():
    terms = check_reward_code(KITCHEN_SINK)
    assert sorted(terms) == ["calls_a_term", "kitchen_sink"]


# -- guards that protect training (terms run in-process there) -----------------------------------
def test_quadratic_broadcast_is_stopped_in_process_before_allocating():
    m = meta(DATA / "hostile_rewards" / "outer_keepdims.py")
    term = compile_reward_code(m["source"])["outer"]
    evaluate_term(term, random_reward_state(16, np.random.default_rng(0)))  # (16, 16) is still small
    big = random_reward_state(8192, np.random.default_rng(0))
    rss_before = max_rss_mb()
    with pytest.raises(RewardCodeError, match=rf"^line {m['marked'][0]}: array-size: .*\(N, N\)"):
        evaluate_term(term, big)  # would be a 512 MB (N, N) float64 array
    assert max_rss_mb() - rss_before < 100


def test_work_budget_bounds_a_term_call():
    source = (
        "def _reward_busy(state):\n"
        "    total = 0.0\n"
        "    for i in range(64):\n"
        "        for j in range(8):\n"
        "            total = total + np.sum(state.joint_pos * state.joint_pos, axis=1)\n"
        "    return total\n"
    )
    with pytest.raises(RewardCodeError, match=r"^line 5: work-budget: "):
        check_reward_code(source)


def test_term_fn_budget_resets_per_call_and_errors_name_the_line():
    term = compile_reward_code((DATA / "good_rewards" / "posture.py").read_text())["near_joint_limits"]
    state = random_reward_state(512, np.random.default_rng(0))
    first = term.fn(state)
    for _ in range(200):  # 200 calls spend far more than one call's budget in total
        np.testing.assert_array_equal(term.fn(state), first)
    broken = compile_reward_code("def _reward_div(state):\n    return state.base_height * (1 / 0)\n")["div"]
    with pytest.raises(RewardCodeError, match=r"^line 2: runtime-error: ZeroDivisionError"):
        evaluate_term(broken, state)


def test_work_is_charged_by_what_each_operation_costs():
    from motionvl.rewards.sandbox.guard import CONST_WORK, COST, WORK_PER_ENV, Guard

    safe_namespace.warm_up()  # every wrapper charges an operation COST knows (else a KeyError here)
    assert COST["sin"] >= 64 * COST["+"] and COST["**"] > 64 * COST["small-power"] and COST["median"] > COST["sum"]

    def spent(source: str) -> float:
        term = next(iter(compile_reward_code(source).values()))
        guard = next(c.cell_contents for c in term.fn.__closure__ if isinstance(c.cell_contents, Guard))
        term.fn(random_reward_state(256, np.random.default_rng(0)))
        return (WORK_PER_ENV * 256 + CONST_WORK - guard.work_left) / 256

    cube = spent("def _reward_c(state):\n    return np.exp(-np.abs(state.joint_pos ** 3).sum(axis=1))\n")
    product = spent("def _reward_c(state):\n    q = state.joint_pos\n    return np.exp(-np.abs(q * q * q).sum(axis=1))\n")
    assert cube > 20 * product  # pow() of negative bases: about a thousand additions per element


def test_all_problems_are_listed_at_once():
    source = "import os\n\n\ndef _reward_a(state):\n    while True:\n        pass\n    return open('x')\n"
    with pytest.raises(RewardCodeError) as info:
        compile_reward_code(source)
    rules = [p.split(":")[:2] for p in info.value.problems]
    assert rules == [["line 1", " import"], ["line 5", " while-loop"], ["line 7", " name"]]


def test_runtime_namespace_is_a_whitelist():
    """Defence in depth behind the static rules: what compiled code can reach at run time."""
    term = compile_reward_code((DATA / "good_rewards" / "minimal.py").read_text())["fell"]
    raw = inspect.getclosurevars(term.fn).nonlocals["raw"]
    namespace = raw.__globals__
    assert set(namespace["__builtins__"]) == set(safe_namespace.SAFE_BUILTIN_NAMES)
    np_ns = namespace["np"]
    assert np_ns is not np and set(vars(np_ns)) == set(safe_namespace.NP_NAMES)
    assert not any(callable(getattr(np_ns, name)) for name in safe_namespace.DTYPE_NAMES)  # astype's names only
    for missing in ("save", "load", "fromfile", "ctypeslib", "lib", "memmap", "frombuffer", "zeros", "empty", "linalg"):
        assert not hasattr(np_ns, missing), missing
    assert not any(value is np or inspect.ismodule(value) for value in vars(np_ns).values())


# -- state API doc ---------------------------------------------------------------------------------
def test_state_api_doc_documents_every_field_from_its_docstring():
    assert "(undocumented)" not in STATE_API_DOC
    for field in dataclasses.fields(RewardState):
        assert re.search(rf"^- state\.{field.name} \[[a-z ]+\]: \S.{{8,}}", STATE_API_DOC, re.M), field.name
    assert "- state.base_height [array]: (N,) pelvis height above the terrain under it, metres." in STATE_API_DOC
    assert "- state.dt [float]:" in STATE_API_DOC and "state.num_envs" in STATE_API_DOC
    assert STATE_ATTRS == {f.name for f in dataclasses.fields(RewardState)} | {"num_envs"}


# -- CLI ---------------------------------------------------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "motionvl.cli", "reward", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=60)


def test_cli_reward_check_exit_codes(tmp_path):
    ok = cli("check", str(DATA / "good_rewards" / "tracking.py"))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("OK: terms:") and "+track_forward_speed" in ok.stdout and "-fall" in ok.stdout

    bad = cli("check", str(DATA / "hostile_rewards" / "file_open_write.py"))
    assert bad.returncode == 1 and bad.stdout == ""
    assert re.search(r"^  line 8: name: `open` is not available", bad.stderr, re.M), bad.stderr

    missing = cli("check", str(tmp_path / "missing.py"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr

    doc = cli("doc")
    assert doc.returncode == 0 and "state.base_height" in doc.stdout and "np functions:" in doc.stdout
