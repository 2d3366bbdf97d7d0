"""The model settings are declared once (motionvl.backend_names.ModelSettings) and every surface derives them: the
`motionvl train`/`synth`/`critique` options, the reward_synthesizer, vlm_critic and orchestrator parameters,
train.launch.py's arguments. A copied table fails here: its names, defaults or
descriptions drift, or a setting added to the dataclass does not reach it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from motionvl.backend_names import (CRITIC_BACKENDS, KINDS, RECORDED, SESSION, SYNTHESIZER_BACKENDS, ModelSettings,
                                    backend_keywords, kind_settings, option_flag)
from motionvl.dataclass_docs import field_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS, DEFAULTS = field_docs(ModelSettings), ModelSettings()
NODE_OF = {"synth": "reward_synthesizer", "critic": "vlm_critic"}
CLI_OF = {"synth": "motionvl.synth.cli", "critic": "motionvl.critic.cli"}


def _options(module: str) -> dict:
    """{dest: argparse action} of a command's parser."""
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(module).add_arguments(parser)
    return {action.dest: action for action in parser._actions}


def test_every_field_is_documented_and_taken_by_a_backend():
    names = [f.name for f in dataclasses.fields(ModelSettings)]
    assert set(DOCS) == set(names), "a docstring per field: the one description of each setting"
    taken = {name for registry in KINDS.values() for backend in registry.values() for name in backend.options}
    assert taken == set(names) and set(RECORDED) | set(SESSION) == set(names)
    assert {"MOTIONVL_OPENAI_API_KEY", "OPENAI_API_KEY"} <= set(re.findall(r"[A-Z_]+_API_KEY", DOCS["base_url"]))
    from motionvl.llm.openai_client import API_KEY_ENV_VARS

    assert set(API_KEY_ENV_VARS) == set(re.findall(r"[A-Z_]+_API_KEY", DOCS["base_url"])), \
        "the API key variables the docs name are the ones the client reads"


def test_the_registries_name_the_backends_and_build_them():
    from motionvl.synth import BACKENDS, backend_options

    assert tuple(SYNTHESIZER_BACKENDS) == BACKENDS
    for backend in SYNTHESIZER_BACKENDS:  # every option a backend is given it takes
        given = backend_keywords("synth", backend, ModelSettings(model="m", base_url="http://h/v1"))
        assert set(given) <= set(backend_options(backend)), backend
    from motionvl.critic.base import _REGISTRY

    assert set(CRITIC_BACKENDS) <= set(_REGISTRY)
    with pytest.raises(ValueError, match="needs base_url and model"):
        backend_keywords("critic", "openai", ModelSettings())
    assert backend_keywords("critic", "transformers", ModelSettings(model="/m")) == {"model_dir": "/m", "device": "auto"}


def test_the_nodes_declare_the_settings_their_backends_take_as_the_dataclass_says():
    pytest.importorskip("rclpy")
    from motionvl.ros import orchestrator_node, reward_synthesizer_node, vlm_critic_node

    for kind, module in (("synth", reward_synthesizer_node), ("critic", vlm_critic_node)):
        for name in kind_settings(kind):
            assert module.PARAMETERS[name] == (getattr(DEFAULTS, name), DOCS[name]), (module.NODE_NAME, name)
    for kind in KINDS:
        for name in RECORDED:
            default, text = orchestrator_node.PARAMETERS[f"{kind}_{name}"]
            assert default == getattr(DEFAULTS, name) and text.endswith(DOCS[name])
    assert orchestrator_node.PARAMETERS["device"] == (DEFAULTS.device, DOCS["device"])


def test_a_search_records_each_kinds_recorded_settings():
    from motionvl.search.loop import BACKEND_KEYS, SearchSettings

    recorded = {f"{kind}_{name}" for kind in KINDS for name in RECORDED}
    assert recorded <= set(SearchSettings.__dataclass_fields__) and recorded <= set(BACKEND_KEYS)


def test_the_launch_arguments_are_the_recorded_settings_and_reach_the_nodes_that_take_them():
    import launch_model

    module = launch_model.load(ROOT / "launch" / "train.launch.py")
    declared = {e.name: e for e in module.generate_launch_description().entities
                if isinstance(e, launch_model.DeclareLaunchArgument)}
    for kind in KINDS:
        for name in RECORDED:
            argument = declared[f"{kind}_{name}"]
            assert argument.default_value == getattr(DEFAULTS, name) and argument.description.endswith(DOCS[name])
            assert module.TEXT["orchestrator"][f"{kind}_{name}"] == f"{kind}_{name}"
            assert module.TEXT[NODE_OF[kind]][name] == f"{kind}_{name}"
    model_arguments = {a for a in declared if a.startswith(("synth_", "critic_"))}
    assert model_arguments == {f"{kind}_{name}" for kind in KINDS for name in RECORDED}, \
        "a model argument not derived from ModelSettings"


def test_the_commands_offer_the_settings_with_the_dataclass_help():
    train = _options("motionvl.search.cli")
    for kind in KINDS:
        for name in RECORDED:
            action = train[f"{kind}_{name}"]
            assert action.option_strings == [option_flag(name, f"{kind}_")] and action.help.startswith(DOCS[name])
    for name in SESSION:
        assert train[name].help.startswith(DOCS[name])
    for kind, module in CLI_OF.items():
        options = _options(module)
        for name in kind_settings(kind):
            assert options[name].option_strings == [option_flag(name)] and options[name].help.startswith(DOCS[name])
            default = getattr(DEFAULTS, name)
            assert options[name].default == (default or None), (module, name)


def test_no_source_declares_a_model_setting_again():
    """A setting's description is written once: no other source holds a copy of a docstring, a table entry
    `"name": (default, ...)` or an option `--flag` of a model setting."""
    own = ROOT / "src" / "motionvl" / "backend_names.py"
    sources = [p for p in [*(ROOT / "src").rglob("*.py"), *(ROOT / "launch").glob("*.py")] if p != own]
    names = [f.name for f in dataclasses.fields(ModelSettings) if f.name != "device"]  # a trainer's device is another
    entry = re.compile(r"""["'](?:(?:synth|critic)_)?(%s)["']\s*:\s*\(""" % "|".join(names))
    flags = {option_flag(n, p) for n in names for p in ("", "synth_", "critic_")}
    flag = re.compile(r"""add_argument\(\s*["'](%s)["']""" % "|".join(re.escape(f) for f in flags))
    found = []
    for path in sources:
        text = path.read_text()
        flat = " ".join(text.split())
        found += [f"{path.relative_to(ROOT)}: table entry {m.group(0)}" for m in entry.finditer(text)]
        found += [f"{path.relative_to(ROOT)}: option {m.group(1)}" for m in flag.finditer(text)]
        found += [f"{path.relative_to(ROOT)}: the description of {n}" for n in names if DOCS[n][:48] in flat]
    assert not found, "\n".join(found)


PROBE = '''
import dataclasses, json, sys
import motionvl.backend_names as b
from motionvl.dataclass_docs import field_docs


@dataclasses.dataclass
class Probed(b.ModelSettings):
    probe_limit_s: float = 7.5
    """probe: a session setting added to the dataclass."""
    probe_region: str = ""
    """probe: a recorded setting added to the dataclass."""


b.ModelSettings, b._DEFAULTS = Probed, Probed()
b._DOCS = {**b._DOCS, **field_docs(Probed)}
b.RECORDED = (*b.RECORDED, "probe_region")
b.SESSION = tuple(f.name for f in dataclasses.fields(Probed) if f.name not in b.RECORDED)
for registry in (b.SYNTHESIZER_BACKENDS, b.CRITIC_BACKENDS):
    registry["openai"] = registry["openai"]._replace(options=(*b.ENDPOINT, "probe_limit_s", "probe_region"))
sys.path.insert(0, sys.argv[2])
import argparse, importlib, launch_model

out = {}
for module in ("motionvl.search.cli", "motionvl.synth.cli", "motionvl.critic.cli"):
    parser = argparse.ArgumentParser()
    importlib.import_module(module).add_arguments(parser)
    out[module] = sorted(a.dest for a in parser._actions)
for module in ("reward_synthesizer_node", "vlm_critic_node", "orchestrator_node"):
    out[module] = sorted(importlib.import_module("motionvl.ros." + module).PARAMETERS)
launch = launch_model.load(sys.argv[1])
out["launch"] = sorted(e.name for e in launch.generate_launch_description().entities
                       if isinstance(e, launch_model.DeclareLaunchArgument))
out["text"] = {node: sorted(table) for node, table in launch.TEXT.items()}
options = importlib.import_module("motionvl.search.backends").BackendOptions()
out["session"] = sorted(f.name for f in dataclasses.fields(options))
print(json.dumps(out))
'''


def test_a_setting_added_to_the_dataclass_appears_everywhere(tmp_path):
    """The dataclass with two more fields (one recorded, one a session's), taken by the openai backends: every
    surface offers them without another line written."""
    pytest.importorskip("rclpy")
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(PROBE))
    done = subprocess.run([sys.executable, str(probe), str(ROOT / "launch" / "train.launch.py"), str(ROOT / "tests")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"synth_probe_region", "critic_probe_region", "probe_limit_s"} <= set(got["motionvl.search.cli"])
    for module in ("motionvl.synth.cli", "motionvl.critic.cli", "reward_synthesizer_node", "vlm_critic_node"):
        assert {"probe_region", "probe_limit_s"} <= set(got[module]), module
    assert {"synth_probe_region", "critic_probe_region"} <= set(got["orchestrator_node"])
    assert {"synth_probe_region", "critic_probe_region"} <= set(got["launch"])
    assert {"synth_probe_region", "critic_probe_region"} <= set(got["text"]["orchestrator"])
    assert "probe_region" in got["text"]["reward_synthesizer"] and "probe_region" in got["text"]["vlm_critic"]
    assert "probe_limit_s" in got["session"]


def _declared_elsewhere(cls, own: Path) -> list[str]:
    """Sources (but `own`) holding a copy of one of `cls`'s field docstrings."""
    docs = field_docs(cls)
    found = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "launch").glob("*.py")]:
        if path != own:
            flat = " ".join(path.read_text().split())
            found += [f"{path.relative_to(ROOT)}: the description of {n}" for n, doc in docs.items() if doc[:40] in flat]
    return found


def test_synthesizer_options_are_declared_once():
    """SynthesizerOptions gives the model synthesizers' keyword defaults, `motionvl synth`'s options (help from the
    docstrings) and, given on the command line, the options the backend is built with."""
    import inspect

    from motionvl.synth import SynthesizerOptions
    from motionvl.synth.cli import _options as cli_options
    from motionvl.synth.cli import add_arguments
    from motionvl.synth.llm import ModelSynthesizer, OpenAISynthesizer

    docs, defaults = field_docs(SynthesizerOptions), SynthesizerOptions()
    keywords = {**inspect.signature(OpenAISynthesizer.__init__).parameters,
                **inspect.signature(ModelSynthesizer.__init__).parameters}
    options = _options("motionvl.synth.cli")
    for f in dataclasses.fields(SynthesizerOptions):
        assert keywords[f.name].default == getattr(defaults, f.name), f.name
        assert options[f.name].default == getattr(defaults, f.name) and options[f.name].help.startswith(docs[f.name])
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--task", "walk", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                              "--model", "m", "--max-retries", "0", "--response-format", "json_object"])
    built = cli_options(args)
    assert built["max_retries"] == 0 and built["response_format"] == "json_object"
    assert built["max_repairs"] == defaults.max_repairs
    assert not _declared_elsewhere(SynthesizerOptions, ROOT / "src" / "motionvl" / "synth" / "api.py")


def test_critic_service_settings_are_declared_once():
    from motionvl.critic.service import ServiceSettings

    assert not _declared_elsewhere(ServiceSettings, ROOT / "src" / "motionvl" / "critic" / "service.py")
