"""`motionvl demo`: run the main job on embedded defaults (what `make demo` runs).

Today that job is the simulator check: stand the robot up under PD at its default pose for
a few seconds, report whether it stayed upright and write a video when the renderer exists.
It will become the full language-guided training loop once that is in place.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# The embedded defaults: no config file or flag is needed.
DEFAULT_SECONDS = 5.0
DEFAULT_OUT = Path("out/demo")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help=f"simulated seconds (default {DEFAULT_SECONDS:g})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")


def run(args: argparse.Namespace) -> int:
    from motionvl.sim import cli as sim_cli

    print(f"motionvl demo: standing the robot under PD for {args.seconds:g} s (output in {args.out})", flush=True)
    sim_args = argparse.Namespace(seconds=args.seconds, out=args.out, robot_config=None, terrain="flat", no_video=False)
    return sim_cli.run(sim_args)
