"""Declaring a node's parameters from one table, with descriptions and typed values."""

from __future__ import annotations

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

from motionvl.robot import ConfigError


def declare_parameters(node: Node, table: dict, read_only: bool = True) -> dict:
    """Declare every `name -> (default, description)` of `table`; return the typed values.

    Dynamic typing lets YAML say 50 where 50.0 is meant; anything that is not the default's type
    (or a number for a float) is a `ConfigError` naming the parameter.
    """
    values = {}
    for name, (default, description) in table.items():
        node.declare_parameter(name, default, ParameterDescriptor(description=description, read_only=read_only,
                                                                  dynamic_typing=True))
        try:
            values[name] = as_type(node.get_parameter(name).value, type(default))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"parameter {name}: {exc}") from exc
    return values


def as_type(value, kind):
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise TypeError(f"expected true/false, got {value!r}")
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is str and isinstance(value, str):
        return value
    if kind in (list, tuple) and value is None:  # an empty array in a params file: ROS 2 cannot type it
        return []
    if kind in (list, tuple) and isinstance(value, (list, tuple)) and (
            all(isinstance(v, str) for v in value) or all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        return list(value)
    raise TypeError(f"expected {kind.__name__}, got {value!r}")
