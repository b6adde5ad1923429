"""The files we ship (docs, example configs, playbooks) stay true to the code."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
from pathlib import Path

import yaml

from remediate.actions import action_classes, default_registry
from remediate.config.settings import Settings, read_config_file
from remediate.playbooks.loading import load_directory
from remediate.server import build_services, create_app

ROOT = Path(__file__).resolve().parents[1]


def test_every_http_route_is_documented_in_the_openapi_file_and_nothing_more(tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "docs/openapi.yaml").read_text())
    documented = {(path, method.upper()) for path, item in spec["paths"].items() for method in item}
    settings = Settings.of(token="t" * 32, playbooks=ROOT / "playbooks", database_url=f"sqlite:///{tmp_path}/r.db")
    app = create_app(settings, services=build_services(settings))
    served = {
        (re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule), method)
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    assert served == documented


def test_the_shipped_playbooks_are_valid() -> None:
    playbooks, errors = load_directory(ROOT / "playbooks", default_registry())
    assert errors == []
    assert len(playbooks) >= 2


def test_the_example_config_file_loads_with_every_key_known() -> None:
    values = read_config_file(ROOT / "docs/config.example.yaml")
    settings = Settings.of(**values)
    assert settings.engine.step_timeout == 300.0
    assert settings.executor.poll_interval == 0.2
    assert settings.notify.sink("oncall") is not None  # the sink the shipped playbooks notify


def test_the_alertmanager_receiver_example_passes_amtool_check_config() -> None:
    result = subprocess.run(
        ["amtool", "check-config", str(ROOT / "alertmanager/alertmanager.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((ROOT / "alertmanager/alertmanager.yml").read_text())
    webhook = next(r for r in config["receivers"] if r["name"] == "remediate")["webhook_configs"][0]
    assert webhook["send_resolved"] is True
    assert webhook["http_config"]["authorization"]["type"] == "Bearer"


def test_every_file_that_tells_how_to_run_alertmanager_names_debians_binary() -> None:
    """Debian's package installs `prometheus-alertmanager`, not `alertmanager`."""
    shipped = [
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("alertmanager/*.yml"),
        *ROOT.glob("helm/**/*.txt"),
    ]
    run_it = re.compile(r"(?<![-\w/])alertmanager --config\.file")
    telling = [path for path in shipped if run_it.search(path.read_text(encoding="utf-8"))]
    assert telling, "no shipped file says how to run AlertManager any more: drop this test or the pattern"
    for path in telling:
        assert "prometheus-alertmanager" in path.read_text(encoding="utf-8"), path.relative_to(ROOT)


def _resolve(dotted: str) -> object:
    """The object a walk name (`judging.engine.Engine.ingest_body`) stands for: the longest importable module
    prefix under `remediate`, then attributes. LookupError when any part is missing."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module("remediate." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                raise LookupError(f"{dotted}: no {name!r} in {found!r}")
            found = getattr(found, name)
        return found
    raise LookupError(f"{dotted}: no module remediate.{parts[0]}")


def _webhook_view(tmp_path: Path) -> object:
    """The function the app calls for POST /webhook, wherever the routes are registered."""
    settings = Settings.of(token="t" * 32, playbooks=ROOT / "playbooks", database_url=f"sqlite:///{tmp_path}/r.db")
    app = create_app(settings, services=build_services(settings))
    (endpoint,) = [r.endpoint for r in app.url_map.iter_rules() if r.rule == "/webhook" and "POST" in r.methods]
    return _unwrapped(app.view_functions[endpoint])


def _unwrapped(view: object) -> object:
    """The view under its decorators: `__wrapped__` (functools.wraps), or the function of the same name that
    a decorator's closure holds (`server._requires` copies the name only)."""
    while True:
        inner = getattr(view, "__wrapped__", None)
        if inner is None:
            cells = getattr(view, "__closure__", None) or ()
            name = getattr(view, "__name__", None)
            held = (cell.cell_contents for cell in cells)
            inner = next((f for f in held if inspect.isfunction(f) and f.__name__ == name), None)
        if inner is None:
            return view
        view = inner


def _is_or_defines(found: object, view: object) -> bool:
    """`found` is `view` itself or the function that defines it (a view registered in a closure)."""
    qualname = getattr(view, "__qualname__", "").split(".<locals>")[0]
    return getattr(found, "__module__", None) == getattr(view, "__module__", "") and (
        getattr(found, "__qualname__", None) == qualname
    )


def test_the_architecture_walk_names_only_functions_that_exist(tmp_path: Path) -> None:
    """The walk of one alert in docs/architecture.md names real code, hop by hop."""
    page = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    walk = page.split("## The walk of one alert", 1)[1].split("\n## ", 1)[0]
    names = {m for m in re.findall(r"`([^`\s]+)`", walk) if re.fullmatch(r"[a-z_]\w*(\.\w+)+", m)}
    # The walk goes from the webhook to the power limit and the run's end: a few dozen hops.
    assert len(names) >= 40, sorted(names)
    missing, resolved = [], {}
    for name in sorted(names):
        try:
            resolved[name] = _resolve(name)
        except LookupError as exc:
            missing.append(str(exc))
    assert not missing, missing
    # It starts where the app serves POST /webhook, the run is claimed from the store, and it ends at a GPU
    # backend setting the power limit: found from the code, so that moving a function moves no test.
    view = _webhook_view(tmp_path)
    assert any(_is_or_defines(found, view) for found in resolved.values()), (view, sorted(names))
    assert any(n.startswith("store.") and "claim" in n.rpartition(".")[2] for n in resolved), sorted(names)
    assert any(
        getattr(found, "__module__", "").startswith("remediate.gpu.") and n.endswith(".set_power_limit")
        for n, found in resolved.items()
    ), sorted(names)
    # The check can fail: a name that moved or never existed is found out.
    for wrong in ("judging.engine.Engine.no_such_step", "store.Store.insert_runs_typed", "nosuchmodule.function"):
        try:
            _resolve(wrong)
        except LookupError:
            continue
        raise AssertionError(f"{wrong} resolved")


def _tree_entries(page: str) -> list[str]:
    """The names in the left column of docs/architecture.md's tree: `server.py`, `store/`, `gpu/ disk/ kube/`, ..."""
    block = page.split("## The tree", 1)[1].split("```", 2)[1]
    entries = []
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            entries += re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split()
    return entries


def test_the_tree_in_the_architecture_page_names_every_module_and_only_files_that_exist() -> None:
    """A map of the modules that no test checks drifts (intake/alertref.py and deadline.py were missing)."""
    page = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    package = ROOT / "remediate"
    entries = _tree_entries(page)
    top = {p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    top |= {f"{p.parent.name}/" for p in package.glob("*/__init__.py")}
    assert sorted(top - set(entries)) == [], "add them to the tree in docs/architecture.md"
    assert sorted(set(entries) - top) == [], "the tree names modules remediate/ does not have"
    # Every file the tree's descriptions name (`facade.py`, `views.py`, ...) is one remediate/ has.
    block = page.split("## The tree", 1)[1].split("```", 2)[1]
    files = {p.name for p in package.rglob("*.py")}
    assert sorted(set(re.findall(r"\b[a-z_0-9]+\.py\b", block)) - files) == []
    # The check can fail: a module that is not there is found out.
    assert "nosuchmodule.py" not in top and _tree_entries("## The tree\n```\n  nosuchmodule.py  x\n```\n") == [
        "nosuchmodule.py"
    ]


def _tree_description(page: str, entry: str) -> str:
    """The text the tree of docs/architecture.md gives `entry` (its first line and the indented lines under it)."""
    block = page.split("## The tree", 1)[1].split("```", 2)[1]
    lines, inside = [], False
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            inside = line.split()[0] == entry
        if inside:
            lines.append(line)
    return "\n".join(lines)


def test_the_tree_describes_actions_as_a_folder_without_a_line_per_action() -> None:
    """A new action is its module and its test; a list of action modules in the page is one more file."""
    actions = _tree_description((ROOT / "docs/architecture.md").read_text(encoding="utf-8"), "actions/")
    assert "found by the registry" in actions
    action_modules = {f"{cls.__module__.rsplit('.', 1)[1]}.py" for cls in action_classes()}
    assert len(action_modules) >= 13  # the registry's modules were found: the check below can fail
    assert sorted(action_modules & set(re.findall(r"\b[a-z_0-9]+\.py\b", actions))) == []


def _shipped_rule_alertnames() -> set[str]:
    """Every alert a shipped Prometheus rule file emits (the repository's and the chart's copies)."""
    names: set[str] = set()
    for path in [*ROOT.glob("alertmanager/rules/*.rules.yml"), *ROOT.glob("helm/remediate/files/rules/*.rules.yml")]:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            names.update(rule["alert"] for rule in group["rules"] if "alert" in rule)
    return names


def test_every_alertname_a_shipped_playbook_matches_is_emitted_by_a_shipped_rule() -> None:
    """A shipped playbook waiting for an alert no shipped rule produces never runs
    (notify-oncall matched GpuXidError; the XID rule emits GPUXidCritical). The node agent's own alerts
    (silent degradations, remediate.agent.gpu_degradations) count as emitted: no rule could."""
    from remediate.agent.gpu_degradations import PCIE_ALERT, SLOWDOWN_ALERT

    emitted = _shipped_rule_alertnames() | {PCIE_ALERT, SLOWDOWN_ALERT}
    assert "GPUXidCritical" in emitted  # the rule files were found and read
    for folder in (ROOT / "playbooks", ROOT / "helm/remediate/files/playbooks"):
        playbooks, errors = load_directory(folder, default_registry())
        assert errors == [] and playbooks, folder
        for playbook in playbooks:
            missing = set(playbook.alertnames) - emitted
            where = f"{folder.relative_to(ROOT)}: {playbook.name}"
            assert not missing, f"{where} matches {sorted(missing)}: no shipped rule emits it"


URL = re.compile(r"\b[a-z][a-z0-9+.-]*://", re.I)


def urls_in(texts: dict[str, str]) -> list[str]:
    """`file: line` of every line holding a URL (scheme://) in `texts` (name -> text)."""
    return [f"{name}: {line.strip()}" for name, text in texts.items() for line in text.splitlines() if URL.search(line)]


def test_no_shipped_playbook_holds_a_url() -> None:
    """Four shipped playbooks posted to http://127.0.0.1:9099/remediate-events, which is
    nothing inside a pod; they name the `oncall` sink of the settings instead (notify, `sink: oncall`)."""
    folders = (ROOT / "playbooks", ROOT / "helm/remediate/files/playbooks")
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for f in folders for p in sorted(f.glob("*.yaml"))}
    assert len(texts) >= 18  # both folders were read: the check below can fail
    assert urls_in({"example.yaml": "      url: http://127.0.0.1:9099/remediate-events\n"}) != []
    assert urls_in(texts) == []
    assert sum(text.count("sink: oncall") for text in texts.values()) == 2 * 13  # training-fail-slow, gpu-degraded: 3


def test_the_readme_examples_name_alerts_a_shipped_rule_emits() -> None:
    """The README's dry-run example and playbook example are copied as written."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"--alertname (\w+)", readme)) | set(re.findall(r"^\s*alertname: (\w+)", readme, re.M))
    assert named, "the README names no alert any more: drop this test or the pattern"
    assert named <= _shipped_rule_alertnames(), sorted(named - _shipped_rule_alertnames())


def test_no_shipped_playbook_only_logs_and_the_catch_all_logger_is_an_example() -> None:
    """Log-critical-alerts matched nearly every alert and each of its runs counted as
    a remediation in `report` and the history. It is off by default: an example to copy, not a shipped
    playbook (playbooks/ and the chart's copies)."""
    for folder in (ROOT / "playbooks", ROOT / "helm/remediate/files/playbooks"):
        playbooks, _ = load_directory(folder, default_registry())
        only_log = [p.name for p in playbooks if {s.action for s in p.steps_for("firing")} <= {"log"}]
        assert only_log == [], f"{folder.relative_to(ROOT)}: {only_log} change nothing but count as remediations"
    examples, errors = load_directory(ROOT / "docs/examples", default_registry())
    assert errors == [] and [p.name for p in examples] == ["log-critical-alerts"]


WORK_ITEM = re.compile(r"\b[Ii]ssues? \d+")
"""A reference to a work item (the word issue and its number): it tells a reader nothing the text could not say
itself (why)."""
SPEAK_OF_BEHAVIOUR = ("remediate", "tests", "helm", "playbooks", "docs", "bench", "README.md", "pyproject.toml")
"""Trees and files whose text must name no work item."""
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".css", ".html", ".json", ".tpl", ".sh", ""}


def work_item_references(root: Path, names: tuple[str, ...]) -> list[str]:
    """`path:line` of every work-item reference in the text files of `names` (folders or files under `root`)."""
    found = []
    for name in names:
        top = root / name
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if not path.is_file() or path.suffix not in TEXT_SUFFIXES or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if WORK_ITEM.search(line):
                    found.append(f"{path.relative_to(root)}:{number}")
    return found


def test_code_tests_and_docs_speak_of_behaviour_not_of_work_items(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text('"""Fixed in ' + "issue" + ' 7."""\nx = 1  # upstream issues #500\n')
    (tmp_path / "notes.toml").write_text("# " + "Issues" + " 3 and 4\n")
    assert work_item_references(tmp_path, ("pkg", "notes.toml")) == ["pkg/a.py:1", "notes.toml:1"]
    assert work_item_references(ROOT, SPEAK_OF_BEHAVIOUR) == []
