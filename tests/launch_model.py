"""What `ros2 launch` makes of this package's launch files, without `launch` (not on PyPI).

`evaluate(path, arguments)` runs a launch file's own `generate_launch_description()` against small
stand-ins of the `launch` and `launch_ros` names it imports, then does what launch_ros (ROS 2 Kilted)
does with the result:

- launch arguments: `name:=value` given, else the declared default (an argument with neither is an error);
- substitutions: LaunchConfiguration, PathJoinSubstitution, FindPackageShare (the package's share
  directory: `motionvl.robot.package_root()`, the source tree on the pip route's editable install, laid
  out as colcon installs it), PythonExpression; IfCondition and
  UnlessCondition accept true/false/1/0 only; OpaqueFunction is called with the context;
- a Node's `parameters` list, in order: a path stays a path; a dict is written to a params file of its
  own keyed `/**` when the node has a name but no namespace, else by its full name `/<namespace>/<name>`
  (launch_ros keys it by node name only when both are given; an empty namespace is the root: `/<name>`),
  whose values are evaluated as launch_ros does: a substitution's text is read as YAML (empty text stays
  ''), `ParameterValue(..., value_type=str)` keeps the text, plain values stay as they are;
- the command line: `<executable> --ros-args -r __node:=<name> [-r __ns:=/<namespace>] --params-file <each,
  in order> [-r <from>:=<to> per remapping]` (a namespace made absolute, as launch_ros does).
  launch_ros finds the executable in `<prefix>/lib/motionvl/` (colcon's install); on the pip route the
  console scripts are in the venv's bin/, which is what `executable_dir` defaults to.

What it does not model (and the launch files must not need): PushRosNamespace, `Parameter`
objects (`-p` rules), composable nodes, event handling beyond recording the handlers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PACKAGE = "motionvl"


# ---------------------------------------------------------------------------------------------- substitutions
class Substitution:
    def perform(self, context: "Context") -> str:
        raise NotImplementedError


def perform(value, context: "Context") -> str:
    """The text of a substitution, a string or a list of both (launch joins a list)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Substitution):
        return value.perform(context)
    if isinstance(value, (list, tuple)):
        return "".join(perform(v, context) for v in value)
    raise TypeError(f"not a substitution: {value!r}")


def _is_substitution(value) -> bool:
    return isinstance(value, Substitution) or (
        isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, Substitution)) for v in value)
        and any(isinstance(v, Substitution) for v in value))


class LaunchConfiguration(Substitution):
    def __init__(self, name: str, default=None):
        self.name, self.default = name, default

    def perform(self, context):
        if self.name in context.configurations:
            return context.configurations[self.name]
        if self.default is not None:
            return perform(self.default, context)
        raise KeyError(f"launch configuration {self.name!r} is not set")


class PathJoinSubstitution(Substitution):
    def __init__(self, parts):
        self.parts = parts

    def perform(self, context):
        return str(Path(*[perform(p, context) for p in self.parts]))


class FindPackageShare(Substitution):
    def __init__(self, package):
        self.package = package

    def perform(self, context):
        assert perform(self.package, context) == PACKAGE
        return str(context.share_dir)


class PythonExpression(Substitution):
    def __init__(self, expression):
        self.expression = expression

    def perform(self, context):
        return str(eval(perform(self.expression, context), {}))  # noqa: S307 - as launch does


class ParameterValue:
    def __init__(self, value, value_type=None):
        self.value, self.value_type = value, value_type


# ---------------------------------------------------------------------------------------------- conditions
def _truth(text: str) -> bool:
    if text.lower() in ("true", "1"):
        return True
    if text.lower() in ("false", "0"):
        return False
    raise ValueError(f"a condition expects true/false/1/0, got {text!r}")


class IfCondition:
    def __init__(self, predicate):
        self.predicate = predicate

    def evaluate(self, context) -> bool:
        return _truth(perform(self.predicate, context))


class UnlessCondition(IfCondition):
    def evaluate(self, context) -> bool:
        return not super().evaluate(context)


# ---------------------------------------------------------------------------------------------- actions
class Action:
    def __init__(self, *args, condition=None, **kwargs):
        self.args, self.kwargs, self.condition = args, kwargs, condition


class DeclareLaunchArgument(Action):
    def __init__(self, name, default_value=None, description="", **kwargs):
        super().__init__(**kwargs)
        self.name, self.default_value, self.description = name, default_value, description


class Node(Action):
    pass


class OpaqueFunction(Action):
    def __init__(self, function, args=None, kwargs=None, **rest):
        super().__init__(**rest)
        self.function, self.fn_args, self.fn_kwargs = function, args or [], kwargs or {}


class RegisterEventHandler(Action):
    def __init__(self, event_handler, **kwargs):
        super().__init__(**kwargs)
        self.handler = event_handler


class EmitEvent(Action):
    def __init__(self, event, **kwargs):
        super().__init__(**kwargs)
        self.event = event


class LaunchDescription:
    def __init__(self, entities=()):
        self.entities = list(entities)


class _Handler:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class OnProcessExit(_Handler):
    pass


class OnProcessIO(_Handler):
    pass


class Shutdown:
    def __init__(self, reason=""):
        self.reason = reason


# ---------------------------------------------------------------------------------------------- the result
@dataclass
class Context:
    configurations: dict
    share_dir: Path


@dataclass
class NodeProcess:
    """One node process as launch_ros would start it."""

    name: str
    executable: str
    argv: list
    params_files: list
    """(path, evaluated dict or None) in command-line order; dicts are the generated `/**` files."""
    action: Any = None


@dataclass
class Launch:
    arguments: dict
    """every declared argument -> its default (None: none)."""
    configurations: dict
    nodes: list = field(default_factory=list)
    handlers: list = field(default_factory=list)

    def node(self, name: str) -> NodeProcess:
        found = [n for n in self.nodes if n.name == name]
        assert len(found) == 1, f"{len(found)} nodes named {name}: {[n.name for n in self.nodes]}"
        return found[0]

    def generated(self, name: str) -> dict:
        """What the launch arguments give the node (its generated `/**` params files merged)."""
        merged: dict = {}
        for _path, values in self.node(name).params_files:
            merged.update(values or {})
        return merged


def _evaluate_value(value, context):
    if isinstance(value, ParameterValue):
        if _is_substitution(value.value):
            text = perform(value.value, context)
            if value.value_type is str:
                return text
            parsed = yaml.safe_load(text) if text else ""
            if value.value_type is not None and not isinstance(parsed, value.value_type):
                raise TypeError(f"parameter value {text!r} is not a {value.value_type.__name__}")
            return parsed
        return value.value
    if _is_substitution(value):
        text = perform(value, context)
        parsed = yaml.safe_load(text) if text else ""  # Kilted: empty text stays an empty string
        if isinstance(parsed, (bool, int, float, str)):
            return parsed
        if isinstance(parsed, list) and parsed and len({type(v) for v in parsed}) == 1:
            return parsed
        raise TypeError(f"launch_ros refuses {text!r} as a parameter value (wrap it in ParameterValue)")
    if isinstance(value, (list, tuple)):
        return [_evaluate_value(v, context) for v in value]
    if isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"not a parameter value: {value!r}")


def _node_process(action: Node, context: Context, executable_dir: Path, workdir: Path) -> NodeProcess:
    kw = action.kwargs
    assert perform(kw["package"], context) == PACKAGE
    name, executable = perform(kw["name"], context), perform(kw["executable"], context)
    namespace = None if kw.get("namespace") is None else perform(kw["namespace"], context).rstrip("/")
    if namespace is not None and not namespace.startswith("/"):
        namespace = "/" + namespace  # '' is the root, '/'
    files = []
    for entry in kw.get("parameters") or []:
        if isinstance(entry, dict):
            values = {key: _evaluate_value(v, context) for key, v in entry.items()}
            path = Path(tempfile.mkstemp(prefix="launch_params_", suffix=".yaml", dir=workdir)[1])
            key = "/**" if namespace is None else f"{namespace.rstrip('/')}/{name}"
            path.write_text(yaml.safe_dump({key: {"ros__parameters": values}}))
            files.append((str(path), values))
        else:
            files.append((perform(entry, context), None))
    argv = [str(executable_dir / executable), *[perform(a, context) for a in kw.get("arguments") or []],
            "--ros-args", "-r", f"__node:={name}", *(["-r", f"__ns:={namespace}"] if namespace else [])]
    for path, _values in files:
        argv += ["--params-file", path]
    for source, target in kw.get("remappings") or []:
        argv += ["-r", f"{perform(source, context)}:={perform(target, context)}"]
    return NodeProcess(name, executable, argv, files, action)


def _walk(entities, context, launch: Launch, executable_dir: Path, workdir: Path) -> None:
    for entity in entities:
        if entity is None:
            continue
        if isinstance(entity, (list, tuple)):
            _walk(entity, context, launch, executable_dir, workdir)
            continue
        if isinstance(entity, Action) and entity.condition is not None and not entity.condition.evaluate(context):
            continue
        if isinstance(entity, DeclareLaunchArgument):
            continue
        if isinstance(entity, Node):
            launch.nodes.append(_node_process(entity, context, executable_dir, workdir))
        elif isinstance(entity, OpaqueFunction):
            _walk(entity.function(context, *entity.fn_args, **entity.fn_kwargs) or [], context, launch,
                  executable_dir, workdir)
        elif isinstance(entity, RegisterEventHandler):
            launch.handlers.append(entity.handler)
        else:
            raise TypeError(f"not modelled: {type(entity).__name__}")


def _modules() -> dict:
    """Stand-ins for the names the launch files import."""
    def module(name, **attrs):
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        return mod

    return {
        "launch": module("launch", LaunchDescription=LaunchDescription),
        "launch.actions": module("launch.actions", DeclareLaunchArgument=DeclareLaunchArgument, EmitEvent=EmitEvent,
                                 OpaqueFunction=OpaqueFunction, RegisterEventHandler=RegisterEventHandler),
        "launch.conditions": module("launch.conditions", IfCondition=IfCondition, UnlessCondition=UnlessCondition),
        "launch.event_handlers": module("launch.event_handlers", OnProcessExit=OnProcessExit, OnProcessIO=OnProcessIO),
        "launch.events": module("launch.events", Shutdown=Shutdown),
        "launch.logging": module("launch.logging", get_logger=logging.getLogger),
        "launch.substitutions": module("launch.substitutions", LaunchConfiguration=LaunchConfiguration,
                                       PathJoinSubstitution=PathJoinSubstitution, PythonExpression=PythonExpression),
        "launch_ros": module("launch_ros"),
        "launch_ros.actions": module("launch_ros.actions", Node=Node),
        "launch_ros.parameter_descriptions": module("launch_ros.parameter_descriptions", ParameterValue=ParameterValue),
        "launch_ros.substitutions": module("launch_ros.substitutions", FindPackageShare=FindPackageShare),
    }


@contextlib.contextmanager
def _stand_ins():
    saved = {name: sys.modules.get(name) for name in _modules()}
    sys.modules.update(_modules())
    try:
        yield
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


def load(path: Path) -> types.ModuleType:
    """The launch file as a module, its launch names bound to the stand-ins."""
    with _stand_ins():
        spec = importlib.util.spec_from_file_location(f"launch_file_{Path(path).stem.replace('.', '_')}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def evaluate(path: Path, arguments: dict, *, workdir: Path, share_dir: Path | None = None,
             executable_dir: Path | None = None) -> Launch:
    """`ros2 launch motionvl <path> name:=value ...`: the node processes it starts, with their command lines."""
    module = load(path)
    description = module.generate_launch_description()
    declared = {e.name: e.default_value for e in description.entities if isinstance(e, DeclareLaunchArgument)}
    unknown = set(arguments) - set(declared)
    assert not unknown, f"{Path(path).name} declares no argument {sorted(unknown)}"
    if share_dir is None:
        from motionvl.robot import package_root

        share_dir = package_root()
    share = Path(share_dir)
    context = Context({}, share)
    for name, default in declared.items():  # defaults may refer to earlier arguments
        if name in arguments:
            context.configurations[name] = str(arguments[name])
        elif default is not None:
            context.configurations[name] = perform(default, context)
        else:
            raise KeyError(f"launch argument {name!r} has no default and was not given")
    launch = Launch(declared, dict(context.configurations))
    _walk(description.entities, context, launch, Path(executable_dir or Path(sys.executable).parent), Path(workdir))
    return launch
