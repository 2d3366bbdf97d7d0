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
    return {e.text.strip() for tag in ("exec_depend", "depend") for e in root.iter(tag)}


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


# the pip route's tools building the interfaces (tools/build_interfaces.py); a distribution has its own
BUILD_TOOL = re.compile(r"^(ament_\w+|rosidl_\w+|python_cmake_module|catkin_pkg)$")


def test_ros_wheels_and_package_xml_name_the_same_ros_packages():
    wheels = {p.removeprefix("ros-").replace("-", "_") for p in pins("requirements-ros.txt")}
    wheels.discard("rmw_fastrtps_cpp")  # the middleware: a distribution brings its own default
    wheels = {w for w in wheels if not BUILD_TOOL.match(w)}
    ros_depends = {d for d in exec_depends() if ROS_MODULE.match(d)}
    # tf2_msgs has no wheel: the simulator publishes /tf only where a distribution provides it
    assert wheels == ros_depends - {"tf2_msgs"}


def test_every_ros_package_the_code_imports_is_declared():
    imported = {m for m in imported_top_modules(ROOT / "src" / "motionvl") if ROS_MODULE.match(m)}
    imported -= set(sys.stdlib_module_names)
    assert imported <= exec_depends(), f"imported but not in package.xml: {sorted(imported - exec_depends())}"


def test_every_interface_file_is_generated_and_imports():
    """`make setup` generated the Python types of every msg/srv/action file (the pip route's rosidl build)."""
    import importlib

    files = sorted(p for kind in ("msg", "srv", "action") for p in (ROOT / kind).glob(f"*.{kind}"))
    assert files, "no interface files found"
    for path in files:
        module = importlib.import_module(f"motionvl.{path.suffix[1:]}")
        assert hasattr(module, path.stem), f"{path.relative_to(ROOT)} has no generated type (re-run make setup)"
    from motionvl.action import TrainCandidate
    from motionvl.msg import LowCommand

    assert {"Goal", "Result", "Feedback"} <= set(dir(TrainCandidate))
    assert LowCommand.get_fields_and_field_types()["motor_cmd"] == "sequence<motionvl/DriveCommand>"


def test_node_executables_are_the_node_modules():
    """setup.py (pip) and CMakeLists.txt (colcon) install one executable per src/motionvl/ros/*_node.py."""
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert 'src/motionvl/ros/*_node.py' in cmake and "DESTINATION lib/${PROJECT_NAME}" in cmake
    from importlib.metadata import entry_points

    scripts = {e.name for e in entry_points(group="console_scripts") if e.value.startswith("motionvl.")}
    nodes = {p.stem for p in (ROOT / "src" / "motionvl" / "ros").glob("*_node.py")}
    assert nodes and nodes | {"motionvl"} == scripts
