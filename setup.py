"""The Python package `motionvl` for pip (the pip-only route; `make setup` builds the ROS interfaces beside it).

A distribution builds the package with colcon from CMakeLists.txt (ament_cmake), which installs the same
Python package, node executables and share/ files and generates the interfaces."""

from glob import glob
from pathlib import Path

from setuptools import find_namespace_packages, setup

PACKAGE = "motionvl"
HERE = Path(__file__).resolve().parent

# The nodes: every module src/motionvl/ros/<name>_node.py with a main(args=None) is the console script
# <name>_node (CMakeLists.txt makes the same executables for colcon). The script enters through
# motionvl.ros.console, which takes SIGINT/SIGTERM before the module's imports.
NODES = sorted(p.stem for p in (HERE / "src" / PACKAGE / "ros").glob("*_node.py"))


def tree(folder: str) -> list:
    """data_files entries installing every file under folder to share/motionvl/<same subfolder>."""
    groups: dict = {}
    for path in sorted(glob(f"{folder}/**/*", recursive=True)):
        p = Path(path)
        if p.is_file() and "__pycache__" not in p.parts:
            groups.setdefault(str(Path("share") / PACKAGE / p.parent), []).append(path)
    return sorted(groups.items())


setup(
    name=PACKAGE,
    version="0.1.0",
    description="Language-guided humanoid motion learning on ROS 2 (MuJoCo, VLM critic, LLM rewards, PPO, ONNX)",
    license="Apache-2.0",
    python_requires=">=3.10",
    package_dir={"": "src"},
    packages=find_namespace_packages(where="src", include=["motionvl", "motionvl.*"]),
    include_package_data=False,
    # dependencies are pinned in requirements.txt, requirements-ros.txt (pip-only route) and
    # requirements-test.txt, installed first (`make setup`; then `pip install -e . --no-deps`)
    install_requires=[],
    zip_safe=False,
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        *tree("launch"),
        *tree("config"),
        *tree("urdf"),
        *tree("msg"),  # the message definitions bags embed (motionvl.bags); colcon installs them with rosidl
        *tree("action"),  # likewise: the actions' feedback messages
    ],
    entry_points={
        "console_scripts": [f"{PACKAGE}={PACKAGE}.cli:main"]
        + [f"{node}={PACKAGE}.ros.console:{node}" for node in NODES],
    },
)
