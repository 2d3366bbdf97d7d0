"""Build MotionVL's ROS interfaces (msg/, srv/, action/) from the ROS 2 wheels into this venv (pip route).

`make setup` runs it once per change of the interface files (a stamp in the venv). A distribution
builds the same package with `colcon build`; this does the same cmake configure/build/install with
-DMOTIONVL_INTERFACES_ONLY=ON and CMAKE_INSTALL_PREFIX=<venv>, after two fixes the wheels need:

- their exported CMake files name the wheel-building interpreter's Python and NumPy include folders
  (/opt/python/...): they are rewritten to this venv's interpreter's (idempotent);
- rosidl installs the generated package `motionvl` (msg/srv/action and the C extensions) into
  site-packages with an empty `__init__.py` and an egg-info; both are removed, so `import motionvl`
  finds the package pip installed (src/motionvl, editable), whose `__init__` extends its path to the
  generated subpackages (pkgutil.extend_path).

Usage: python tools/build_interfaces.py [--build-dir build/interfaces] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL_PYTHON = re.compile(r"/opt/python/cp\d+-cp\d+(?:[a-z]*)")


def fix_wheel_cmake_files(prefix: Path) -> int:
    """Point the wheels' exported CMake include folders at this interpreter's; returns files changed."""
    import numpy

    include = sysconfig.get_paths()["include"]
    numpy_include = numpy.get_include()
    changed = 0
    for path in (prefix / "share").glob("*/cmake/*.cmake"):
        text = path.read_text(errors="surrogateescape")
        if "/opt/python/" not in text:
            continue
        new = re.sub(WHEEL_PYTHON.pattern + r"/lib/python[\d.]+/site-packages/numpy/_core/include", numpy_include, text)
        new = re.sub(WHEEL_PYTHON.pattern + r"/include/python[\d.]+", include, new)
        if new != text:
            path.write_text(new, errors="surrogateescape")
            changed += 1
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=str(ROOT / "build" / "interfaces"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    prefix = Path(sys.prefix)
    if prefix == Path(sys.base_prefix):
        sys.exit("error: run this with the venv's python (it installs into the venv)")
    for tool in ("cmake", "cc", "c++"):
        if shutil.which(tool) is None:
            sys.exit(f"error: {tool} not found; the interfaces are built with cmake and a C/C++ compiler "
                     "(apt-get install cmake g++)")
    start = time.monotonic()
    fixed = fix_wheel_cmake_files(prefix)
    build = Path(args.build_dir)
    build.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AMENT_PREFIX_PATH": str(prefix), "CMAKE_PREFIX_PATH": str(prefix)}
    site = Path(sysconfig.get_paths()["purelib"])
    configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DMOTIONVL_INTERFACES_ONLY=ON", "-DBUILD_TESTING=OFF",
                 f"-DCMAKE_INSTALL_PREFIX={prefix}", f"-DPython3_EXECUTABLE={sys.executable}",
                 f"-DPYTHON_INSTALL_DIR={site.relative_to(prefix)}", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_INSTALL_RPATH={prefix / 'lib'}", "-Wno-dev"]
    for step in (configure, ["cmake", "--build", str(build), "-j", str(args.jobs)],
                 ["cmake", "--install", str(build)]):
        done = subprocess.run(step, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            print(done.stdout[-6000:], file=sys.stderr)
            sys.exit(f"error: {' '.join(step[:2])} failed (exit {done.returncode}); the output's end is above")
    generated = site / "motionvl"
    (generated / "__init__.py").unlink(missing_ok=True)
    for egg in site.glob("motionvl-*.egg-info"):
        shutil.rmtree(egg)
    print(f"interfaces built into {generated} in {time.monotonic() - start:.0f} s"
          + (f" ({fixed} wheel CMake files pointed at this interpreter)" if fixed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
