"""Field docstrings of dataclasses: the one place a setting is described, read back for help texts
(command-line options, ROS parameter descriptions)."""

from __future__ import annotations

import ast
import inspect
import textwrap


def field_docs(cls) -> dict:
    """{field name: docstring} from the string literal under each field of a dataclass."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body, docs = tree.body[0].body, {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def dataclass_parameters(cls, skip=()) -> dict:
    """Node parameters `{field: (default, docstring)}` of a dataclass's fields (but those in `skip`), the table
    motionvl.ros.params declares."""
    import dataclasses

    docs, defaults = field_docs(cls), cls()
    return {f.name: (getattr(defaults, f.name), docs.get(f.name, "")) for f in dataclasses.fields(cls)
            if f.name not in skip}
