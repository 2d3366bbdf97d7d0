"""`motionvl synth`: propose reward candidates for a task, outside the search (to try a backend or a prompt).

  motionvl synth --task "walk forward with straight knees" -k 4 --out cands/
  motionvl synth --task "..." --run RUN_DIR --feedback fb.json        # revise RUN_DIR's spec
  motionvl synth --task "..." --run RUN_DIR --min-success-rate 0.95   # hold the parent to a stricter gate
  motionvl synth --task "..." --backend openai --base-url http://127.0.0.1:8000/v1 --model qwen2.5-7b-instruct
  motionvl synth --task "..." --print-prompt                         # the model's context, no call

With --run, the parent is RUN_DIR/reward_spec.yaml and its statistics and scores RUN_DIR/term_stats.json and
RUN_DIR/eval.json (when present). Each accepted candidate is written as OUT/candidate_<k>.yaml; with --ledger
the call is appended to that file as a synthesis record (replayable with --backend replay --ledger FILE).
Exit status: 0 when at least one candidate is accepted, 1 when none is, 2 for bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from motionvl.backend_names import add_model_arguments, backends_help, kind_settings, model_settings
from motionvl.rl.config import add_dataclass_arguments
from motionvl.synth.api import REQUEST_GATES, SynthesizerOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="the task sentence")
    parser.add_argument("-k", "--num-candidates", type=int, default=4, help="candidates to propose (default 4)")
    parser.add_argument("--iteration", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.3)
    parser.add_argument("--backend", default="rules",
                        help=f"{backends_help('synth')} (default rules)")
    parser.add_argument("--parent", type=Path, help="reward spec to revise (YAML/JSON)")
    parser.add_argument("--run", type=Path, help="a training run directory: its spec, term_stats.json and eval.json")
    parser.add_argument("--feedback", type=Path,
                        help="a MotionFeedback JSON file (the feedback.json of motionvl critique --out DIR)")
    for gate, meaning in (("min_success_rate", "share of held-out walks the parent must succeed in"),
                          ("max_fall_fraction", "share of held-out episodes the parent may fall in")):
        parser.add_argument(f"--{gate.replace('_', '-')}", type=float, metavar="SHARE",
                            help=f"the search gate a parent is held to: {meaning} (default: the search's default)")
    add_model_arguments(parser, kind_settings("synth"))
    parser.add_argument("--ledger", type=Path, help="replay: the ledger to answer from; else: append the call to it")
    add_dataclass_arguments(parser, SynthesizerOptions)  # --max-repairs, --max-new-tokens, --max-retries, ...
    parser.add_argument("--out", type=Path, help="directory for the accepted candidates' YAML files")
    parser.add_argument("--print-prompt", action="store_true", help="print the model's prompt and exit")


def _request(args):
    from motionvl.rewards.spec import load_reward_spec
    from motionvl.synth import SynthesisRequest
    from motionvl.synth.context import load_json

    parent = stats = scores = None
    if args.run is not None:
        if not args.run.is_dir():
            raise ValueError(f"--run {args.run}: not a directory")
        parent = load_reward_spec(args.run / "reward_spec.yaml")
        stats = load_json(args.run / "term_stats.json") if (args.run / "term_stats.json").exists() else None
        scores = load_json(args.run / "eval.json") if (args.run / "eval.json").exists() else None
    if args.parent is not None:
        parent = load_reward_spec(args.parent)
    feedback = load_json(args.feedback) if args.feedback is not None else None
    gates = {g: getattr(args, g) for g in REQUEST_GATES if getattr(args, g, None) is not None}
    return SynthesisRequest(args.task, args.iteration, args.num_candidates, parent=parent, parent_statistics=stats,
                            parent_scores=scores, feedback=feedback, seed=args.seed, temperature=args.temperature,
                            gates=gates or None)


def _options(args) -> dict:
    from motionvl.synth import synthesizer_options

    return synthesizer_options(args.backend, model_settings(vars(args)), ledger=args.ledger,
                               **{f.name: getattr(args, f.name) for f in dataclasses.fields(SynthesizerOptions)})


def run(args: argparse.Namespace) -> int:
    from motionvl.synth import SynthesisError, append_record, make_synthesizer, synthesis_record
    from motionvl.synth.context import build_prompt

    try:
        request = _request(args).checked()
        if args.print_prompt:
            prompt = build_prompt(request)
            print(prompt.text)
            print(f"\n[{len(prompt.system) + len(prompt.user)} characters, ~{(len(prompt.system) + len(prompt.user)) // 4} "
                  "tokens]", file=sys.stderr)
            return 0
        synth = make_synthesizer(args.backend, **_options(args))
        candidates = synth.propose(request)
    except (SynthesisError, ValueError) as exc:
        print(f"motionvl synth: {exc}", file=sys.stderr)
        return 2
    try:
        if args.ledger is not None and args.backend != "replay":
            append_record(args.ledger, synthesis_record(request, candidates, synth))
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"motionvl synth: cannot write: {exc}", file=sys.stderr)
        return 2
    kind = "model-free rules, not an LLM" if synth.name == "rules" else ("offline" if synth.offline else "model")
    print(f"{synth.name} ({kind}): {sum(c.ok for c in candidates)} of {len(candidates)} candidates accepted")
    for k, c in enumerate(candidates):
        if not c.ok:
            print(f"  #{k} rejected: {c.rejection}")
            continue
        changes = ", ".join(f"{e['term']} {e['change']}" + (f" {json.dumps(e['old'])}->{json.dumps(e['new'])}"
                                                            if e["change"] in ("weight", "params") else "")
                            for e in c.edits)
        print(f"  #{k} ok: {changes or 'no change'}" + (f"  [{c.rationale}]" if c.rationale else ""))
        if args.out is not None:
            c.spec.save(args.out / f"candidate_{k}.yaml")
    used = synth.budget.to_dict()
    if not synth.offline:
        print(f"model calls {used['calls']}, tokens {used['tokens']}")
    return 0 if any(c.ok for c in candidates) else 1
