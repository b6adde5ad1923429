"""The files we ship (docs, example configs, playbooks) stay true to the code."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from remediate.actions import default_registry
from remediate.config import Settings, read_config_file
from remediate.playbooks import load_directory
from remediate.server import build_services, create_app

ROOT = Path(__file__).resolve().parents[1]


def test_every_http_route_is_documented_in_the_openapi_file_and_nothing_more(tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "docs/openapi.yaml").read_text())
    documented = {(path, method.upper()) for path, item in spec["paths"].items() for method in item}
    settings = Settings(token="t", playbooks=ROOT / "playbooks", database_url=f"sqlite:///{tmp_path}/r.db")
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
    settings = Settings(**values)
    assert settings.step_timeout == 300.0
    assert settings.poll_interval == 0.2


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
    """Issue 15, finding 8: Debian's package installs `prometheus-alertmanager`, not `alertmanager`."""
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
