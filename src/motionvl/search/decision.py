"""Choosing between the best reward so far (r*) and an iteration's challengers.

In this order, each step on recorded numbers only (so a recorded run's choices can be recomputed):

1. Hard gates no synthesizer can edit (GateConfig): on the held-out randomised episodes a success rate
   of at least `min_success_rate` and at most r*'s minus `max_success_drop` below it, a fall share of at
   most `max_fall_fraction`; in the playback no fault and at most `max_clipped_share` of clipped commands.
   A gate r* fails too (a weak start: a task no reference fits, a first walk backward) holds a challenger
   back only where it is worse than r* on that measure: r* cannot keep its place by failing the gate itself.
   A fall in the one playback counts with the falls gate: against an r* that falls in more of the held-out
   episodes than the gate allows, it holds a challenger back only when the challenger falls more often there
   (one rollout's fall says less than the fall share of many). Any other playback fault always holds.
2. Ranking of the candidates that passed: score = task_weight x task score + alignment_weight x critic
   alignment, divided by the weights' sum (the task score alone without critic feedback). Candidates within
   `margin` of the best-ranked score tie: among them, the critic's alignment with the task sentence ranks
   (the task score saturates once a walk covers its distance, so a tie on the score is a tie on the walk).
3. Against r*, best-ranked first: a challenger ahead by more than `margin` wins unless the critic's
   pairwise comparison, asked in both orders and counted only when both answers agree, prefers r*
   (a veto); one within +-margin wins only when that comparison prefers it (a tiebreak) or, when it leaves the tie
   open, the held-out evaluation shows it better on the styles the sentence names (`style_tiebreak`); one behind
   by more than the margin loses. The first winner becomes r*; if none wins, r* stays.
"""

from __future__ import annotations

from typing import Callable

from motionvl.search.config import GateConfig, RankingConfig
from motionvl.search.playback import fall_only
from motionvl.task import style_improvement


def _gate_checks(candidate: dict, best: dict | None, gates: GateConfig) -> dict[str, str]:
    """gate -> why `candidate` fails it (only the failed gates). `best` is r*'s record (None for the start)."""
    ev, pb = candidate.get("evaluation") or {}, candidate.get("playback") or {}
    out = {}
    success, falls = ev.get("success_rate"), ev.get("fell_fraction")
    if success is None or success < gates.min_success_rate:
        out["success"] = f"success rate {_pct(success)} < {_pct(gates.min_success_rate)}"
    if best is not None and success is not None:
        floor = (best.get("evaluation") or {}).get("success_rate", 0.0) - gates.max_success_drop
        if success < floor:
            out["success_drop"] = f"success rate {_pct(success)} is more than {_pct(gates.max_success_drop)} below r*'s"
    if falls is None or falls > gates.max_fall_fraction:
        out["falls"] = f"falls in {_pct(falls)} of episodes > {_pct(gates.max_fall_fraction)}"
    if not pb:
        out["playback"] = "no playback"
    else:
        if gates.require_no_fault and pb.get("fault"):
            out["fall_fault" if fall_only(pb["fault"]) else "fault"] = f"playback fault: {pb['fault']}"
        if pb.get("clipped_share", 0.0) > gates.max_clipped_share:
            out["clipped"] = f"{_pct(pb['clipped_share'])} of commands clipped > {_pct(gates.max_clipped_share)}"
    return out


def gate_failures(candidate: dict, best: dict | None, gates: GateConfig) -> list[str]:
    """Why `candidate` fails the hard gates (empty: it passes). `best` is r*'s record (None for the start)."""
    return list(_gate_checks(candidate, best, gates).values())


# a gate a challenger may be let through when r* fails the matching gate: (r*'s gate, where the measure is read,
# its key, lower is better)
_SHARED = {"success": ("success", "evaluation", "success_rate", False),
           "falls": ("falls", "evaluation", "fell_fraction", True),
           "fall_fault": ("falls", "evaluation", "fell_fraction", True),
           "clipped": ("clipped", "playback", "clipped_share", True)}


def failures_against(candidate: dict, best: dict | None, gates: GateConfig) -> list[str]:
    """The gate failures that hold `candidate` back against r* (`best`): all of them, except a gate r* fails
    too where the candidate is no worse than r* (module docstring, step 1)."""
    own = _gate_checks(candidate, best, gates)
    if best is None:
        return list(own.values())
    theirs = _gate_checks(best, None, gates)
    out = []
    for gate, why in own.items():
        if gate in _SHARED and _SHARED[gate][0] in theirs:
            _, where, key, lower_is_better = _SHARED[gate]
            mine, r_star = (candidate.get(where) or {}).get(key), (best.get(where) or {}).get(key)
            if mine is not None and r_star is not None and (mine <= r_star if lower_is_better else mine >= r_star):
                continue
        out.append(why)
    return out


def alignment(candidate: dict) -> float | None:
    fb = candidate.get("feedback")
    return float(fb["alignment_score"]) if fb and fb.get("valid") else None


def score(candidate: dict, ranking: RankingConfig, use_critic: bool) -> float:
    """The ranking score in [0, 1] (module docstring); an invalid critique counts as alignment 0."""
    task = float((candidate.get("evaluation") or {}).get("task_score") or 0.0)
    if not use_critic or ranking.alignment_weight == 0:
        return task
    total = ranking.task_weight + ranking.alignment_weight
    return (ranking.task_weight * task + ranking.alignment_weight * (alignment(candidate) or 0.0)) / total


def verdict_of(judgement: dict | None) -> str | None:
    """'challenger', 'best' or None from a two-order judgement {challenger_first, best_first}: counted only
    when both answers are valid and agree."""
    if not judgement:
        return None
    a, b = judgement.get("challenger_first") or {}, judgement.get("best_first") or {}
    if not (a.get("valid") and b.get("valid")):
        return None
    first = {"first": "challenger", "second": "best"}.get(a.get("preferred"))
    second = {"first": "best", "second": "challenger"}.get(b.get("preferred"))
    return first if first is not None and first == second else None


def style_gain(challenger: dict, best: dict, measures, least: float) -> str | None:
    """How the held-out evaluation shows `challenger` better than r* on every style measure by at least `least` of
    r*'s value (motionvl.task.style_improvement), succeeding and falling no worse (None when it does not)."""
    ev, bev = challenger.get("evaluation") or {}, best.get("evaluation") or {}
    if ev.get("success_rate", 0.0) < bev.get("success_rate", 0.0) or \
            ev.get("fell_fraction", 1.0) > bev.get("fell_fraction", 1.0):
        return None
    return style_improvement(ev, bev, measures, least)


def decide(best: dict, challengers: list[dict], *, gates: GateConfig, ranking: RankingConfig, use_critic: bool,
           judge: Callable[[dict], dict | None] | None = None, style_measures=()) -> dict:
    """{"winner": id or None, "verdicts": {id: {outcome, reason, score, gates, verdict}}, "summary": str}.

    challengers: records with id and, when trained, evaluation / playback / feedback; a record with
    "failed" set (rejected by validation, crashed in training) keeps that as its reason. judge(challenger)
    returns the two-order pairwise judgement against r* (None: not asked). style_measures: the sentence's
    (Task.style_measures), for a tie the comparison leaves open."""
    best_score = score(best, ranking, use_critic)
    verdicts: dict[str, dict] = {}
    ranked = []
    for c in challengers:
        if c.get("failed"):
            verdicts[c["id"]] = {"outcome": "failed", "reason": c["failed"], "score": None}
            continue
        failures = failures_against(c, best, gates)
        s = score(c, ranking, use_critic)
        if failures:
            verdicts[c["id"]] = {"outcome": "gated", "reason": "; ".join(failures), "score": s, "gates": failures}
        else:
            ranked.append((s, c))
    ranked.sort(key=lambda sc: -sc[0])
    if use_critic and ranked:
        tied = [sc for sc in ranked if sc[0] >= ranked[0][0] - ranking.margin]
        tied.sort(key=lambda sc: (-(alignment(sc[1]) or 0.0), -sc[0]))
        ranked = tied + ranked[len(tied):]
    winner = None
    for s, c in ranked:
        delta = s - best_score
        entry = {"score": s, "delta": delta}
        if winner is not None:
            verdicts[c["id"]] = {**entry, "outcome": "lost", "reason": f"ranked below {winner}"}
            continue
        if delta < -ranking.margin:
            verdicts[c["id"]] = {**entry, "outcome": "lost",
                                 "reason": f"score {s:.3f} is {-delta:.3f} below r*'s {best_score:.3f}"}
            continue
        judgement = judge(c) if (judge is not None and use_critic and ranking.pairwise) else None
        v = verdict_of(judgement)
        entry["verdict"] = v
        if delta > ranking.margin and v != "best":
            winner = c["id"]
            how = "; the critic's comparison agrees" if v == "challenger" else (
                "; the critic's comparison abstained or disagreed with itself" if judgement else "")
            verdicts[c["id"]] = {**entry, "outcome": "won", "reason": f"score {s:.3f} beats r*'s {best_score:.3f}{how}"}
        elif delta > ranking.margin:
            verdicts[c["id"]] = {**entry, "outcome": "lost",
                                 "reason": f"score {s:.3f} beats r*'s {best_score:.3f} but the critic prefers r* "
                                           "in both orders (veto)"}
        elif v == "challenger":
            winner = c["id"]
            verdicts[c["id"]] = {**entry, "outcome": "won",
                                 "reason": f"score {s:.3f} ties r*'s {best_score:.3f}; the critic prefers it in both "
                                           "orders (tiebreak)"}
        elif v is None and (shown := style_gain(c, best, style_measures, ranking.style_tiebreak)):
            winner = c["id"]
            verdicts[c["id"]] = {**entry, "outcome": "won",
                                 "reason": f"score {s:.3f} ties r*'s {best_score:.3f}, the critic's comparison leaves it "
                                           f"open, and the held-out evaluation shows {shown} (style tiebreak)"}
        else:
            verdicts[c["id"]] = {**entry, "outcome": "lost",
                                 "reason": f"score {s:.3f} ties r*'s {best_score:.3f} and the critic's comparison "
                                           "does not prefer it"}
    if winner:
        summary = f"{winner} replaces {best['id']} as r*"
    elif not ranked:
        summary = f"every candidate was rejected, failed or gated: r* stays {best['id']}"
    else:
        summary = f"no candidate beat {best['id']}: r* stays"
    return {"winner": winner, "best_score": best_score, "verdicts": verdicts, "summary": summary}


def choose_start(samples: list[dict], *, gates: GateConfig, ranking: RankingConfig, use_critic: bool) -> dict:
    """The start among rewards sampled from scratch (a task no reference fits): the best-ranked sample that passes
    the gates, else the best-ranked one that trained (a start is needed to go on), else none. Same shape as
    `decide`'s answer."""
    trained = [c for c in samples if not c.get("failed")]
    ranked = sorted(trained, key=lambda c: -score(c, ranking, use_critic))
    passing = [c for c in ranked if not gate_failures(c, None, gates)]
    winner = (passing or ranked or [None])[0]
    verdicts = {}
    for c in samples:
        if c.get("failed"):
            verdicts[c["id"]] = {"outcome": "failed", "reason": c["failed"], "score": None, "gates": [], "verdict": None}
            continue
        failures = gate_failures(c, None, gates)
        won = winner is not None and c["id"] == winner["id"]
        why = ("the best-ranked sample that passes the gates" if won and not failures else
               "the best-ranked sample; none passed the gates" if won else
               f"ranked below {winner['id']}" if not failures else "failed the gates: " + "; ".join(failures))
        verdicts[c["id"]] = {"outcome": "won" if won else "lost", "reason": why,
                             "score": round(score(c, ranking, use_critic), 4), "gates": failures, "verdict": None}
    summary = (f"{winner['id']} starts ({len(passing)} of {len(samples)} samples passed the gates)" if winner else
               f"none of {len(samples)} samples trained")
    return {"winner": winner["id"] if winner else None, "verdicts": verdicts, "summary": summary}


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * float(x):.1f}%"
