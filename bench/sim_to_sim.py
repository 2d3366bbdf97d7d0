"""Sim-to-sim agreement: a walking policy over ROS walks within 10% of `motionvl eval`'s distance.

    python bench/sim_to_sim.py --policy runs/walk/policy.onnx            # a policy you have
    python bench/sim_to_sim.py --train-minutes 10 --out runs/walk         # trains one first (reference reward)

Same command, no randomisation, both command paths. Three distances per path, each over --seconds
of walking from a standing start:
  eval       `motionvl.rl.evaluate.evaluate` in-process (the batched env, PD in the model's actuators),
             mean over --episodes
  playback   the deployment controller in-process on the single-robot simulator's hardware emulation
             (`motionvl.deploy.playback`): the deployment code without the transport
  ros        `motionvl deploy-sim` (simulator node + deployment node over DDS, real time)
The benchmark passes when |ros - eval| <= 10% of eval on every path and the ROS run latched no
fault (run it with --realtime-priority 50 where SCHED_FIFO is permitted: the torque path at 500 Hz
in real time needs it on a loaded machine). A policy that does not walk
(eval < --min-distance, 5 m in 10 s by default) is reported as such and fails: 0 m against 0 m
proves nothing (--allow-non-walking prints the figures anyway, to check the mechanics). A larger
difference is a bug to find, not a tolerance to widen: the playback figure says whether it lies in
the controller or in the transport. JSON last line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TOLERANCE = 0.10


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", help="exported ONNX policy; without it one is trained")
    parser.add_argument("--train-minutes", type=float, default=10.0, help="training budget when no --policy")
    parser.add_argument("--out", default="runs/sim_to_sim", help="run directory when training")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--command", type=float, nargs=3, default=(0.5, 0.0, 0.0), metavar=("VX", "VY", "YAW"))
    parser.add_argument("--episodes", type=int, default=8, help="eval episodes (the mean is compared)")
    parser.add_argument("--paths", default="pd,torque")
    parser.add_argument("--min-distance", type=float, default=5.0, help="eval distance that counts as walking (m)")
    parser.add_argument("--allow-non-walking", action="store_true", help="compare even when the policy does not walk")
    parser.add_argument("--realtime-priority", type=int, default=0, help="SCHED_FIFO for deploy-sim (0: none)")
    args = parser.parse_args(argv)

    from motionvl.deploy.playback import play
    from motionvl.rl.evaluate import evaluate

    policy = Path(args.policy) if args.policy else train(args)
    result = {"policy": str(policy), "trained_here": not args.policy, "seconds": args.seconds,
              "command": list(args.command), "tolerance": TOLERANCE}
    ev = evaluate(policy, seconds=args.seconds, episodes=args.episodes, randomize=False, command=tuple(args.command))
    result["eval"] = {"distance_m": ev["forward_distance_m"], "min_m": ev["forward_distance_min_m"],
                      "fell_fraction": ev["fell_fraction"]}
    walks = ev["forward_distance_m"] >= args.min_distance * args.seconds / 10.0
    result["walks"] = walks
    result["paths"] = {}
    for path in [p.strip() for p in args.paths.split(",") if p.strip()]:
        pb = play(str(policy), seconds=args.seconds, command=tuple(args.command), path=path)
        ros = deploy_sim(policy, path, args)
        d_eval = ev["forward_distance_m"]
        row = {"playback_m": round(pb["distance_m"], 4), "playback_fell": pb["fell"], "ros_m": ros.get("distance_m"),
               "ros_falls": ros.get("falls"), "ros_run_seconds": ros.get("run_seconds"),
               "ros_period_ms": ros.get("period_ms"), "ros_latency_ms": ros.get("latency_ms"),
               "ros_overruns": ros.get("overruns"), "ros_late_cycles": ros.get("late_cycles"),
               "ros_clips": ros.get("clipped_commands"),
               "ros_faults": ros.get("faults")}
        for name, d in (("playback", pb["distance_m"]), ("ros", ros.get("distance_m"))):
            row[f"{name}_vs_eval"] = None if d is None or not d_eval else round((d - d_eval) / abs(d_eval), 4)
        row["within_tolerance"] = row["ros_vs_eval"] is not None and abs(row["ros_vs_eval"]) <= TOLERANCE
        row["ros_fault_free"] = ros.get("faults") == []
        result["paths"][path] = row
        print(json.dumps({"path": path, **row}), flush=True)
    agree = all(r["within_tolerance"] and r["ros_fault_free"] for r in result["paths"].values())
    result["passed"] = bool(walks and agree)
    if not walks:
        result["verdict"] = (f"the policy does not walk (eval {ev['forward_distance_m']:.2f} m < {args.min_distance} m "
                             f"per 10 s): no agreement can be shown with it")
    else:
        result["verdict"] = "agree within 10%, no fault over ROS" if agree else \
            "DISAGREE or a fault over ROS: a bug to find (compare playback and ros, see ros_faults)"
    print(json.dumps(result))
    return 0 if result["passed"] or (args.allow_non_walking and not walks) else 1


def train(args) -> Path:
    from motionvl.rl.trainer import train_policy

    run = Path(args.out)
    print(f"training a policy for {args.train_minutes:g} minutes into {run} (no --policy given)", flush=True)
    result = train_policy(run, minutes=args.train_minutes, resume=(run / "checkpoints" / "latest.pt").exists())
    return Path(result.policy_path)


def deploy_sim(policy: Path, path: str, args) -> dict:
    cmd = [sys.executable, "-m", "motionvl.cli", "deploy-sim", "--policy", str(policy), "--seconds", str(args.seconds),
           "--path", path, "--realtime-priority", str(args.realtime_priority), "--command", *map(str, args.command)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds * 20 + 120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-3:]}
    return json.loads(lines[-1])


if __name__ == "__main__":
    sys.exit(main())
