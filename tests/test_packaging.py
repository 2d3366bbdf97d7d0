"""The dependency lists agree: requirements files (pins) and package.xml (a ROS 2 distribution's view)."""

from __future__ import annotations

import ast
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ("requirements.txt", "requirements-ros.txt", "requirements-test.txt")
TEST_TOOLS = {"pytest", "pytest-timeout", "hypothesis", "psutil"}
# ROS interface and client packages: what `import X` names when X comes from ROS (not from PyPI proper)
ROS_MODULE = re.compile(r"^(rclpy|rcl_interfaces|builtin_interfaces|\w+_msgs|\w+_srvs)$")


def pins(name: str) -> dict[str, str]:
    found = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            package, sep, version = line.partition("==")
            assert sep and version, f"{name}: {line!r} is not pinned with =="
            found[package.lower()] = version
    return found


def exec_depends() -> set[str]:
    root = ET.parse(ROOT / "package.xml").getroot()
    return {e.text.strip() for e in root.iter("exec_depend")}


def imported_top_modules(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_every_package_is_pinned_once():
    seen: dict[str, str] = {}
    for name in REQUIREMENTS:
        for package in pins(name):
            assert package not in seen, f"{package} is pinned in {seen[package]} and {name}"
            seen[package] = name


def test_the_runtime_holds_no_test_tool_and_no_ros_wheel():
    runtime = pins("requirements.txt")
    assert not TEST_TOOLS & set(runtime), "test tools belong in requirements-test.txt"
    assert not [p for p in runtime if p.startswith("ros-")], "ROS 2 wheels belong in requirements-ros.txt"
    assert TEST_TOOLS <= set(pins("requirements-test.txt"))


def test_ros_wheels_and_package_xml_name_the_same_ros_packages():
    wheels = {p.removeprefix("ros-").replace("-", "_") for p in pins("requirements-ros.txt")}
    wheels.discard("rmw_fastrtps_cpp")  # the middleware: a distribution brings its own default
    ros_depends = {d for d in exec_depends() if ROS_MODULE.match(d)}
    # tf2_msgs has no wheel: the simulator publishes /tf only where a distribution provides it
    assert wheels == ros_depends - {"tf2_msgs"}


def test_every_ros_package_the_code_imports_is_declared():
    imported = {m for m in imported_top_modules(ROOT / "src" / "motionvl") if ROS_MODULE.match(m)}
    imported -= set(sys.stdlib_module_names)
    assert imported <= exec_depends(), f"imported but not in package.xml: {sorted(imported - exec_depends())}"
