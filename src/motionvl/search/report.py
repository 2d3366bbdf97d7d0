"""The search report: report.md and report.html (with PNGs in report/) written from the run's ledger.

Sections: the task and how the run was made; the exported policy; the chosen reward as code and
weights with its diff against the start; a heatmap of term weights over iterations (r* after each)
and of every candidate; the lineage (parent, term-level diff, scores, why each won or lost); the
scores and critic feedback of each iteration; learning curves; the final evaluation and gait numbers
beside the start's; the start and final playbacks side by side; a table in the layout of the paper's
Table I (per-term episode rewards and task scores); the model use of the synthesizer and the critic
(calls, tokens, images, bytes against the run's caps); where the time went.
Everything comes from the ledger and the candidates' run directories, so `motionvl train --report
RUN_DIR` rewrites it at any time.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from motionvl.search.ledger import Ledger
from motionvl.search.deps import term_diff
from motionvl.search.lineage import describe_diff, term_weights

REPORT_DIR = "report"
GAIT_ROWS = (("success_rate", "success rate (the task's criterion, as read above)", "pct"),
             ("fell_fraction", "fell", "pct"), ("task_score", "task score", "f3"),
             ("forward_distance_m", "forward distance (m)", "f2"), ("mean_speed_mps", "mean speed (m/s)", "f3"),
             ("tracking_error_mps", "velocity tracking error (m/s)", "f3"),
             ("heading_error_deg", "heading error (deg)", "f1"),
             ("knee_angle_stance_deg", "stance knee flexion (deg)", "f1"), ("torso_pitch_deg", "torso pitch (deg)", "f1"),
             ("step_frequency_hz", "step frequency (Hz)", "f2"), ("swing_clearance_m", "swing clearance (m)", "f3"),
             ("stance_slip_mps", "stance slip (m/s)", "f3"))


class RunView:
    """The ledger of a run read back as candidates, iterations and results."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.ledger = Ledger(self.run_dir)
        self.settings = self.ledger.get("run", "settings") or {}
        self.config = self.settings.get("config") or {}
        self.candidates: dict[str, dict] = {}
        start = self.ledger.get("start", "start")
        if start:
            self.candidates["start"] = {"id": "start", "iteration": 0, "spec": start["spec"]}
        self.proposals = dict(self.ledger.items("synthesis"))
        for key, record in self.proposals.items():
            for cid, c in zip(record.get("ids") or [], record["candidates"]):
                self.candidates[cid] = {**c, "id": cid, "iteration": int(key[1:])}
        self.decisions = {int(key[1:]): data for key, data in self.ledger.items("decided")}
        for cid, c in self.candidates.items():
            c["trained"] = self.ledger.get("trained", cid)
            c["validated"] = self.ledger.get("validated", cid)
            c["playback"] = self.ledger.get("filmed", cid) or self.ledger.get("played", cid)
            c["feedback"] = self.ledger.get("critiqued", cid)
            c["evaluation"] = ((c["trained"] or {}).get("outcome") or {}).get("evaluation") or {}
            c["verdict"] = next((d["verdicts"][cid] for d in self.decisions.values() if cid in d["verdicts"]), None)
        if self.ledger.has("trained", "final"):
            self.candidates["final"] = {"id": "final", "spec": None, **{k: None for k in ("validated",)},
                                        "trained": self.ledger.get("trained", "final"),
                                        "playback": self.ledger.get("filmed", "final") or self.ledger.get("played", "final"),
                                        "feedback": self.ledger.get("critiqued", "final")}
            self.candidates["final"]["evaluation"] = ((self.candidates["final"]["trained"] or {}).get("outcome")
                                                      or {}).get("evaluation") or {}
        self.exported = self.ledger.get("exported", "policy")
        self.best_after = self._best_after()
        if "final" in self.candidates:
            self.candidates["final"]["spec"] = self.candidates[self.best_after[-1]]["spec"]
            self.candidates["final"]["parent"] = self.best_after[-1]

    def _best_after(self) -> list[str]:
        """r*'s id after the start and after each decided iteration."""
        best = ["start"] if "start" in self.candidates else []
        for it in sorted(self.decisions):
            best.append(self.decisions[it]["winner"] or best[-1])
        return best

    def label(self) -> str:
        """The run's label from the backends that actually answered (the synthesis records' backend, the
        critiques' critic), falling back to the settings' names."""
        from motionvl.search.config import mode_label

        s = self.settings
        synths = {str((d.get("synthesizer") or {}).get("backend") or "").split(":")[0]
                  for d in self.proposals.values() if d.get("candidates")} - {""}
        critics = {str(d.get("critic") or "") for _, d in self.ledger.items("critiqued")} - {""}
        synth = next(iter(synths)) if len(synths) == 1 else s.get("synthesizer")
        critic = next(iter(critics)) if len(critics) == 1 else s.get("critic")
        mode = s.get("mode", "synth+critic")
        return mode_label(mode, synth if mode != "reference" else None, critic if mode == "synth+critic" else None)

    def parent(self, cid: str) -> str | None:
        c = self.candidates[cid]
        if "parent" in c:
            return c["parent"]
        it = c.get("iteration") or 0
        return self.best_after[it - 1] if 0 < it <= len(self.best_after) else None

    def timing(self) -> dict:
        return run_timing(self.ledger)

    def model_use(self) -> list[dict]:
        """Per backend that called a model (the synthesizer, the critic): its name, what it used
        (motionvl.llm.usage.USAGE_KEYS, summed over the run) and the run's caps on it."""
        from motionvl.llm.usage import totals
        from motionvl.search.loop import critic_usage

        limits = self.config.get("limits") or {}
        out = []
        synth = [d for d in self.proposals.values()]
        names = sorted({str((d.get("synthesizer") or {}).get("backend")) for d in synth
                        if (d.get("synthesizer") or {}).get("backend")})
        used = totals(d.get("usage") or {} for d in synth)
        if synth:
            out.append({"part": "synthesizer", "backend": ", ".join(names) or self.settings.get("synthesizer"),
                        **used, "caps": {k: limits.get(f"max_synth_{k}") for k in ("calls", "tokens", "bytes")}})
        critiques = [d for _, d in self.ledger.items("critiqued")]
        if critiques:
            names = sorted({str(d.get("critic")) for d in critiques if d.get("critic")})
            out.append({"part": "critic", "backend": ", ".join(names), **critic_usage(self.ledger),
                        "caps": {k: limits.get(f"max_critic_{k}") for k in ("calls", "tokens", "images", "bytes")}})
        return out


def _task_of(settings: dict):
    """The run's task (motionvl.task.Task) as recorded, else read again from its sentence; None when unreadable."""
    from motionvl.task import Task, TaskError, make_task

    try:
        if settings.get("task_object"):
            return Task.from_dict(settings["task_object"])
        return make_task(settings["task"]) if settings.get("task") else None
    except TaskError:
        return None


def run_timing(ledger: Ledger) -> dict:
    """Seconds of the run by part, from the ledger: wall_s (first to last record), train_s (PPO training
    inside the trainers), evaluation_s (held-out evaluation), synthesis, validation, playback, critique,
    comparison, table (the Table I episodes of the start and exported policies), filming (the exported policy's
    playback rendered when it was not). The rest of the wall time is the trainers' start-up, the ROS traffic and
    the waiting."""
    times = [r["t"] for r in ledger.records]
    trained = [d.get("outcome") or {} for _, d in ledger.items("trained")]
    wall = lambda kind: sum(d.get("wall_s") or 0.0 for _, d in ledger.items(kind))  # noqa: E731
    return {"wall_s": (max(times) - min(times)) if times else 0.0,
            "train_s": sum(o.get("train_wall_s") or 0.0 for o in trained),
            "evaluation_s": sum(o.get("eval_wall_s") or 0.0 for o in trained),
            "synthesis": wall("synthesis"), "validation": wall("validated"), "playback": wall("played"),
            "critique": sum((d.get("meta") or {}).get("wall_s") or 0.0 for _, d in ledger.items("critiqued")),
            "comparison": wall("compared"), "table": wall("table"), "filming": wall("filmed")}


# ----------------------------------------------------------------------------- figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def weight_heatmap(columns: list[tuple[str, dict]], path: Path, title: str) -> Path:
    """Term weights (rows) of each spec (columns) as a heatmap with the values written in."""
    import numpy as np

    plt = _plt()
    terms: list[str] = []
    for _, spec in columns:
        terms += [t for t in term_weights(spec) if t not in terms]
    data = np.full((len(terms), len(columns)), np.nan)
    for j, (_, spec) in enumerate(columns):
        for name, w in term_weights(spec).items():
            data[terms.index(name), j] = w
    fig, ax = plt.subplots(figsize=(1.2 + 0.75 * len(columns), 0.8 + 0.28 * len(terms)))
    im = ax.imshow(np.ma.masked_invalid(data), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(columns)), [c for c, _ in columns], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(terms)), terms, fontsize=8)
    for i in range(len(terms)):
        for j in range(len(columns)):
            if not np.isnan(data[i, j]):
                ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if data[i, j] < 0.6 else "black")
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.04, label="weight")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def learning_curves(view: RunView, path: Path) -> Path | None:
    plt = _plt()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    drawn = 0
    for cid, c in view.candidates.items():
        run = ((c.get("trained") or {}).get("outcome") or {}).get("run_dir")
        hist = Path(run) / "history.jsonl" if run else None
        if not hist or not hist.exists():
            continue
        rows = [json.loads(line) for line in hist.read_text().splitlines() if line.strip()]
        its = [r["iteration"] for r in rows]
        style = {"start": dict(color="black", lw=1.6), "final": dict(color="tab:red", lw=1.6)}.get(cid, dict(lw=0.9, alpha=0.8))
        top.plot(its, [r.get("mean_return") for r in rows], label=cid, **style)
        bottom.plot(its, [r.get("fall_fraction") for r in rows], **style)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    top.set_ylabel("mean episode return\n(own reward)")
    bottom.set_ylabel("fall fraction")
    bottom.set_xlabel("PPO iteration (a warm start continues its parent's count)")
    top.legend(fontsize=7, ncol=4)
    top.set_title("training of every candidate", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def side_by_side(left: Path | None, right: Path | None, path: Path, titles=("start", "final")) -> Path | None:
    if not left or not right or not Path(left).exists() or not Path(right).exists():
        return None
    plt = _plt()
    import matplotlib.image as mpimg

    fig, axes = plt.subplots(1, 2, figsize=(14, 6))
    for ax, image, title in zip(axes, (left, right), titles):
        ax.imshow(mpimg.imread(str(image)))
        ax.set_title(title)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- document model
class Doc:
    """Sections of headings, paragraphs, tables, code, images and videos, rendered to Markdown and HTML."""

    def __init__(self):
        self.blocks: list[tuple] = []

    def h(self, text: str, level: int = 2):
        self.blocks.append(("h", level, text))

    def p(self, text: str):
        self.blocks.append(("p", text))

    def table(self, header: list, rows: list[list]):
        self.blocks.append(("table", header, rows))

    def code(self, text: str, lang: str = ""):
        self.blocks.append(("code", text, lang))

    def image(self, rel: str, alt: str):
        self.blocks.append(("image", rel, alt))

    def videos(self, items: list[tuple[str, str]]):
        self.blocks.append(("videos", items))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "table":
                out.append("| " + " | ".join(map(_md_cell, b[1])) + " |")
                out.append("|" + "---|" * len(b[1]))
                out += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in b[2]]
            elif b[0] == "code":
                out.append(f"```{b[2]}\n{b[1].rstrip()}\n```")
            elif b[0] == "image":
                out.append(f"![{b[2]}]({b[1]})")
            elif b[0] == "videos":
                out.append(" · ".join(f"[{title}]({rel})" for title, rel in b[1]))
            out.append("")
        return "\n".join(out)

    def html(self, title: str) -> str:
        e = html.escape
        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>"
               "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
               "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;"
               "text-align:left;vertical-align:top}th{background:#f3f3f3}pre{background:#f6f6f6;padding:1em;overflow:auto}"
               "img{max-width:100%}video{width:48%;margin-right:1%}</style></head><body>"]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{e(b[1])}</p>")
            elif b[0] == "table":
                out.append("<table><tr>" + "".join(f"<th>{e(str(c))}</th>" for c in b[1]) + "</tr>")
                out += ["<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in b[2]]
                out.append("</table>")
            elif b[0] == "code":
                out.append(f"<pre><code>{e(b[1])}</code></pre>")
            elif b[0] == "image":
                out.append(f"<p><img src='{e(b[1])}' alt='{e(b[2])}'></p>")
            elif b[0] == "videos":
                out.append("<p>" + "".join(f"<video controls src='{e(rel)}' title='{e(t)}'></video>" for t, rel in b[1])
                           + "</p><p>" + " · ".join(e(t) for t, _ in b[1]) + "</p>")
        out.append("</body></html>")
        return "\n".join(out)


def _md_cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _terrain_level_reached(candidate: dict) -> float | None:
    """The mean terrain level of a candidate's last training iteration (None on a terrain without levels)."""
    stats = (((candidate.get("trained") or {}).get("outcome") or {}).get("term_stats") or {}).get("terrain_level")
    return (stats or {}).get("last")


def _fmt(value, kind: str = "f3") -> str:
    if value is None:
        return "-"
    if kind == "pct":
        return f"{100 * float(value):.1f}%"
    return f"{float(value):.{kind[1:]}f}"


# ----------------------------------------------------------------------------- the report
def write_report(run_dir: str | Path) -> dict:
    """Write report.md, report.html and report/*.png for the search in run_dir; returns their paths."""
    view = RunView(run_dir)
    run_dir = view.run_dir
    figs = run_dir / REPORT_DIR
    figs.mkdir(exist_ok=True)
    rel = lambda p: os.path.relpath(p, run_dir) if p else None  # noqa: E731
    s, cfg = view.settings, view.config
    doc = Doc()
    doc.h(f"MotionVL search: {s.get('task', '?')}", 1)
    doc.p(f"Label: {view.label()} (mode {s.get('mode')}; synthesizer {s.get('synthesizer') if s.get('mode') != 'reference' else '-'}; "
          f"critic {s.get('critic') if s.get('mode') == 'synth+critic' else '-'}). Preset {s.get('preset')}: K={cfg.get('candidates')} "
          f"candidates x N={cfg.get('iterations')} iterations, {cfg.get('candidate_iterations')} PPO iterations per candidate "
          f"({'warm-started from r*' if cfg.get('warm_start') else 'from scratch'}), start {cfg.get('base_iterations')}, "
          f"final {cfg.get('final_iterations')}. Code {s.get('code_version')}.")
    task = _task_of(s)
    if task is not None:
        origin = (view.ledger.get("start", "start") or {}).get("origin")
        doc.p(f"Task as read: {task.describe(float((cfg.get('evaluation') or {}).get('seconds') or 10.0))}"
              + (f". Not understood: {'; '.join(task.unjudged)}" if task.unjudged else "")
              + (f". Start: the {origin} reward" if origin else "") + ".")
    finished = view.ledger.get("run", "finished")
    if not finished:
        doc.p("This run has not finished: the report shows what the ledger holds so far.")

    # -- exported result
    doc.h("Result")
    start = view.candidates.get("start")
    chosen_id = (view.exported or {}).get("candidate") or (view.best_after[-1] if view.best_after else None)
    chosen = view.candidates.get(chosen_id) if chosen_id else None
    if view.exported:
        doc.p(f"Exported {rel(view.exported['policy'])} from candidate {chosen_id} ({view.exported['reason']}); "
              f"reward spec hash {view.exported['reward_spec_hash']}.")
    if start and chosen:
        rows = [[label, _fmt(start["evaluation"].get(k), kind), _fmt(chosen["evaluation"].get(k), kind)]
                for k, label, kind in GAIT_ROWS]
        if start.get("feedback") or chosen.get("feedback"):
            rows.append(["critic alignment (checked)", _fmt((start.get("feedback") or {}).get("alignment_score")),
                         _fmt((chosen.get("feedback") or {}).get("alignment_score"))])
        ev = start["evaluation"]
        doc.p(f"Reward-free evaluation on {ev.get('episodes')} held-out randomised episodes of {ev.get('seconds')} s at "
              f"{ev.get('command')} on {ev.get('terrain', 'flat')} ground"
              + (f" (level {ev['terrain_level']})" if ev.get("terrain_level") is not None else "")
              + f", success: {(ev.get('criterion') or {}).get('kind', 'distance')} "
              "(pushes, friction, gains, latency randomised):")
        origin = (view.ledger.get("start", "start") or {}).get("origin", "reference")
        doc.table(["", f"start ({origin} reward)", f"exported ({chosen_id})"], rows)

    # -- the chosen reward
    if start and chosen:
        doc.h("Chosen reward")
        diff = term_diff(start["spec"], chosen["spec"])
        doc.p(f"Against the start: {describe_diff(diff)}.")
        sw, cw = term_weights(start["spec"]), term_weights(chosen["spec"])
        doc.table(["term", "start weight", "chosen weight", "change"],
                  [[t, _fmt(sw.get(t), "f3"), _fmt(cw.get(t), "f3"),
                    "" if sw.get(t) == cw.get(t) else ("added" if t not in sw else "removed" if t not in cw else
                                                         f"{cw[t] - sw[t]:+.3f}")] for t in list(sw) + [t for t in cw if t not in sw]])
        import yaml

        doc.code(yaml.safe_dump(chosen["spec"], sort_keys=False, width=100), "yaml")

    # -- weights over iterations
    columns = [(("start" if i == 0 else f"after it {i}") + f"\n{cid}", view.candidates[cid]["spec"])
               for i, cid in enumerate(view.best_after) if view.candidates.get(cid, {}).get("spec")]
    if columns:
        doc.h("How the reward evolved")
        weight_heatmap(columns, figs / "weights_best.png", "r* term weights over iterations")
        doc.image(rel(figs / "weights_best.png"), "term weights of r* over iterations")
        every = [(cid, c["spec"]) for cid, c in view.candidates.items() if c.get("spec") and cid != "final"]
        if len(every) > len(columns):
            weight_heatmap(every, figs / "weights_candidates.png", "term weights of every candidate")
            doc.image(rel(figs / "weights_candidates.png"), "term weights of every candidate")

    # -- lineage
    doc.h("Lineage")
    rows = []
    for cid, c in view.candidates.items():
        ev, fb, v = c.get("evaluation") or {}, c.get("feedback") or {}, c.get("verdict") or {}
        parent = view.parent(cid)
        diff = describe_diff(term_diff(view.candidates[parent]["spec"], c["spec"])) if parent and c.get("spec") and \
            view.candidates.get(parent, {}).get("spec") else ("reference" if cid == "start" else "-")
        outcome = v.get("outcome") or ("start" if cid == "start" else "final" if cid == "final" else "-")
        reason = v.get("reason") or _failure(c) or ""
        rows.append([cid, parent or "-", diff, _fmt(ev.get("success_rate"), "pct"), _fmt(ev.get("fell_fraction"), "pct"),
                     _fmt(ev.get("task_score")), _fmt(ev.get("knee_angle_stance_deg"), "f1"), _fmt(fb.get("alignment_score")),
                     _fmt(v.get("score")), outcome, reason])
    doc.table(["candidate", "parent", "term-level diff", "success", "falls", "task score", "stance knee (deg)",
               "alignment", "rank score", "outcome", "why"], rows)
    checked = [(cid, (c.get("feedback") or {}).get("meta", {}).get("cross_check")) for cid, c in view.candidates.items()]
    checked = [(cid, x) for cid, x in checked if x]
    if checked:
        from motionvl.critic.crosscheck import RULE

        doc.p(f"A model critic's claims are cross-checked with the rollout's kinematics: {RULE}. "
              + "; ".join(f"{cid}: said {_fmt(x.get('stated_alignment'))}, {x.get('confirmed')} of {x.get('measurable')} "
                          "measurable claims confirmed"
                          + ("" if not x.get("contradicted") else " (contradicted: " + ", ".join(
                              f"{d['label']} said {d.get('said')} measured {_fmt(d.get('measured'), 'f1')}"
                              for d in x["contradicted"][:4]) + ")")
                          for cid, x in checked) + ".")

    # -- iterations
    doc.h("Iterations")
    for it in sorted(view.decisions):
        d = view.decisions[it]
        proposal = view.proposals.get(f"i{it}") or {}
        ids = proposal.get("ids") or []
        doc.h(f"Iteration {it}: {d['summary']}", 3)
        if d.get("note") or proposal.get("error"):
            doc.p(d.get("note") or proposal.get("error"))
        parent = view.best_after[it - 1] if it - 1 < len(view.best_after) else None
        fb = (view.candidates.get(parent) or {}).get("feedback") or {}
        if fb:
            sugg = "; ".join(f"{x.get('direction')} {x.get('term')} ({x.get('reason')})" for x in fb.get("suggestions") or [])
            doc.p(f"Critic feedback on r* ({parent}, {fb.get('critic')}): alignment {_fmt(fb.get('alignment_score'))}; "
                  f"suggestions: {sugg or 'none'}" + (f"; could not judge: {', '.join(fb['unjudged'])}" if fb.get("unjudged") else ""))
        for cid, c in zip(ids, proposal.get("candidates") or []):
            cfb = (view.candidates.get(cid) or {}).get("feedback") or {}
            what = c.get("rationale") or c.get("response") or ""
            line = f"{cid}: {what[:300]}" + ("" if c.get("ok") else f" (rejected: {(c.get('rejection') or '')[:200]})")
            if cfb:
                line += f" -> critic alignment {_fmt(cfb.get('alignment_score'))}"
            doc.p(line)

    # -- learning curves
    curves = learning_curves(view, figs / "learning_curves.png")
    if curves:
        doc.h("Learning curves")
        doc.image(rel(curves), "learning curves")

    # -- playbacks side by side
    final = chosen if chosen else None
    if start and final and start.get("playback") and final.get("playback"):
        doc.h("Start and final playback")
        sheet = side_by_side(start["playback"].get("contact_sheet"), final["playback"].get("contact_sheet"),
                             figs / "start_vs_final.png", titles=("start (reference reward)", f"final ({chosen_id})"))
        if sheet:
            doc.image(rel(sheet), "contact sheets of the start and final policies")
        vids = [(t, rel(pb["video"])) for t, pb in (("start", start["playback"]), (chosen_id, final["playback"]))
                if pb.get("video")]
        if vids:
            doc.videos(vids)
        for name, pb in (("start", start["playback"]), (chosen_id, final["playback"])):
            doc.p(f"{name} playback: {pb.get('duration_s', 0):.1f} s, fault: {pb.get('fault') or 'none'}, "
                  f"clipped commands {_fmt(pb.get('clipped_share'), 'pct')}")

    # -- Table I
    tables = dict(view.ledger.items("table"))
    if tables:
        doc.h("Table I layout: per-term episode rewards and task scores")
        doc.p("Each term at weight 1 (its normalised signed value) per second of episode on the held-out episodes, "
              "summed up to the first fall; the same terms for every row, whatever reward the policy was trained on.")
        terms = []
        for t in tables.values():
            terms += [k for k in t["terms"] if k not in terms]
        header = ["method", "command", "terrain (level)", *terms, "task score", "success", "stance knee (deg)"]
        rows, reached = [], []
        for key, t in tables.items():
            c = view.candidates.get(key) or {}
            ev = c.get("evaluation") or {}
            level = t.get("terrain_level", ev.get("terrain_level"))
            ground = f"{t.get('terrain') or ev.get('terrain') or 'flat'} ({'-' if level is None else level})"
            rows.append([t["label"], str(t.get("command") or ev.get("command") or "-"), ground,
                         *[_fmt(t["terms"].get(k)) for k in terms], _fmt(ev.get("task_score")),
                         _fmt(ev.get("success_rate"), "pct"), _fmt(ev.get("knee_angle_stance_deg"), "f1")])
            reached.append(_terrain_level_reached(c))
        if any(level is not None for level in reached):
            # the paper's Table I reports the terrain level: the one training reached (evaluated: "terrain (level)")
            header.append("terrain level (training)")
            for row, level in zip(rows, reached):
                row.append(_fmt(level, "f1"))
        doc.table(header, rows)

    # -- model use
    use = view.model_use()
    if use:
        doc.h("Model use")
        doc.p("Calls, tokens (as the servers reported them where plausible, else estimated at 4 characters a token), "
              "images and bytes over the run, per backend, against the run's caps (limits.max_synth_* and "
              "max_critic_*). An offline backend (rules, kinematic) calls no model.")
        keys = ("calls", "prompt_tokens", "completion_tokens", "images", "bytes_sent", "bytes_received")
        doc.table(["part", "backend", "calls", "prompt tokens", "completion tokens", "images", "bytes sent",
                   "bytes received", "caps"],
                  [[u["part"], u["backend"], *[str(u.get(k, 0)) for k in keys],
                    ", ".join(f"{k} {v}" for k, v in u["caps"].items() if v is not None) or "-"] for u in use])

    # -- time
    t = view.timing()
    doc.h("Where the time went")
    total = max(t["wall_s"], 1e-9)
    doc.table(["part", "seconds", "share of wall time"],
              [[k, f"{v:.1f}", f"{100 * v / total:.1f}%"] for k, v in t.items() if k != "wall_s"] +
              [["whole run (ledger's first to last record)", f"{t['wall_s']:.1f}", "100%"]])

    md_path, html_path = run_dir / "report.md", run_dir / "report.html"
    md_path.write_text(doc.markdown())
    html_path.write_text(doc.html(f"MotionVL search: {s.get('task', '')}"))
    return {"md": md_path, "html": html_path, "figures": figs}


def _failure(c: dict) -> str | None:
    if c.get("rejection"):
        return f"rejected: {c['rejection']}"
    if c.get("validated") and not c["validated"].get("ok"):
        return f"sandbox: {c['validated'].get('error')}"
    trained = c.get("trained")
    if trained and not trained.get("ok"):
        return f"training failed: {trained.get('reason')}"
    return None
