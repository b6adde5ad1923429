"""The registry finds every shipped action by itself: a new action is one module."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

import remediate.actions
from remediate.actions import Action, StepContext, action_classes, default_registry
from remediate.config.settings import Settings
from remediate.gpu import SimulatedBackend
from tests.support.waiting import scaled

ACTIONS = Path(remediate.actions.__file__).resolve().parent


def _declared_names(source: str) -> set[str]:
    """The `name` every class in `source` sets, annotated (`name: ClassVar[str] = "x"`) or not (`name = "x"`)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            targets = [item.target] if isinstance(item, ast.AnnAssign) else getattr(item, "targets", [])
            named = any(isinstance(target, ast.Name) and target.id == "name" for target in targets)
            if named and isinstance(item.value, ast.Constant):
                names.add(item.value.value)
    return names


def _names_declared_in_the_sources() -> set[str]:
    """The `name` of every class in remediate/actions, read from the files, not imported."""
    return set().union(*(_declared_names(p.read_text(encoding="utf-8")) for p in ACTIONS.rglob("*.py")))


def test_the_source_reader_finds_a_name_however_the_class_assigns_it() -> None:
    # A new action may write `name = "log.annotate"` without the ClassVar annotation: the registry
    # registers it all the same, so the reader the test above compares with must find it too.
    source = 'class A:\n    name = "a.plain"\n\nclass B:\n    name: ClassVar[str] = "b.annotated"\n    other = "x"\n'
    assert _declared_names(source) == {"a.plain", "b.annotated"}


def test_every_action_class_in_the_package_is_registered_without_a_list() -> None:
    assert set(default_registry().names()) == _names_declared_in_the_sources()
    assert len(_names_declared_in_the_sources()) >= 13  # the AST walk itself found the shipped actions


class OutsideAction(Action):
    """An Action subclass outside the package (like a test's own) is not a shipped action."""

    name: ClassVar[str] = "test.outside"

    def plan(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {}

    def execute(self, params: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
        return {}


def test_each_action_is_built_from_its_familys_settings_section_never_the_whole_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`from_deps` gets the section its class names (`settings_section`), one section
    type per family (the name's first part), and never the whole Settings."""
    handed: dict[str, Any] = {}
    for cls in action_classes():
        built = cls.from_deps.__func__  # type: ignore[attr-defined]

        def spy(klass: type[Action], deps: Any, built: Any = built) -> Action:
            handed[klass.name] = deps.settings
            return built(klass, deps)

        monkeypatch.setattr(cls, "from_deps", classmethod(spy))
    settings = Settings()
    sections = {type(getattr(settings, f.name)) for f in dataclasses.fields(Settings)}
    default_registry(settings)

    assert set(handed) == {cls.name for cls in action_classes()}
    by_family: dict[str, set[type]] = {}
    for cls in action_classes():
        section = handed[cls.name]
        assert not isinstance(section, Settings), cls.name
        expected = getattr(settings, cls.settings_section) if cls.settings_section else None
        assert section is expected, cls.name
        assert section is None or type(section) in sections, cls.name
        by_family.setdefault(cls.name.split(".")[0], set()).add(type(section))
    assert {family: len(types) for family, types in by_family.items()} == dict.fromkeys(by_family, 1)
    assert any(section is not None for section in handed.values())


def test_an_action_defined_outside_the_package_is_not_registered() -> None:
    assert "test.outside" not in default_registry()
    assert OutsideAction not in action_classes()


@pytest.fixture
def extra_module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on the package's search path: a module there is `remediate.actions.<name>`."""
    monkeypatch.setattr(remediate.actions, "__path__", [*remediate.actions.__path__, str(tmp_path)])
    action_classes.cache_clear()
    yield tmp_path
    sys.modules.pop("remediate.actions.probe_action", None)
    monkeypatch.undo()
    action_classes.cache_clear()


def test_a_new_module_in_the_package_is_registered_built_from_the_settings(
    extra_module_dir: Path, tmp_path: Path
) -> None:
    (extra_module_dir / "probe_action.py").write_text(
        textwrap.dedent(
            """
            from typing import ClassVar

            from remediate.actions.base import Action, Where


            class ProbeAction(Action):
                name: ClassVar[str] = "probe.gpu_count"
                where: ClassVar[Where] = Where.NODE

                def __init__(self, gpu_backend):
                    self.gpu_backend = gpu_backend

                @classmethod
                def from_deps(cls, deps):
                    return cls(deps.gpu_backend)

                def plan(self, params, ctx):
                    return {"gpus": len(self.gpu_backend().devices())}

                execute = plan
            """
        ),
        encoding="utf-8",
    )
    gpus = SimulatedBackend.write_example(tmp_path / "gpus.yaml", count=3)
    registry = default_registry(Settings.of(gpu_backend="simulated", gpu_simulator_file=gpus))
    probe = registry.get("probe.gpu_count")
    assert probe.where == "node"
    # The probe reads no context: plan gets none, which keeps this test off StepContext's fields.
    assert probe.plan({}, None) == {"gpus": 3}  # type: ignore[arg-type]
    # The shipped actions are all still there beside it.
    assert set(registry.names()) == _names_declared_in_the_sources() | {"probe.gpu_count"}


def test_after_the_extra_module_is_gone_it_is_not_registered_again() -> None:
    # The discovery looks at the modules on the package path now, not at every subclass ever imported.
    assert "probe.gpu_count" not in default_registry()


HEAVY = ("kubernetes", "pynvml", "torch")


def _heavy_modules_after_discovery(*extra_dirs: Path) -> list[str]:
    """The HEAVY modules a fresh interpreter holds once it built the registry (`extra_dirs`: more module dirs)."""
    script = (
        "import json, sys\n"
        "import remediate.actions\n"
        "remediate.actions.__path__.extend(sys.argv[1:])\n"
        "remediate.actions.default_registry()\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))\n"
    )
    command = [sys.executable, "-c", script, *map(str, extra_dirs)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_discovery_imports_every_action_module_but_no_client_library(tmp_path: Path) -> None:
    # The registry imports each module of the package when a server or agent starts: an action imports
    # kubernetes, pynvml or torch when a step uses it, never at its module's top.
    assert _heavy_modules_after_discovery() == []
    # The check can fail: a module whose top imports pynvml is found out.
    (tmp_path / "eager_action.py").write_text("import pynvml  # noqa: F401\n", encoding="utf-8")
    assert _heavy_modules_after_discovery(tmp_path) == ["pynvml"]
