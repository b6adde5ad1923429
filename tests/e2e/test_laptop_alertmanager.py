"""The shipped alertmanager/alertmanager.yml read its bearer token from /etc/remediate/token while
scripts/serve writes ./remediate.token, so on a laptop AlertManager's posts were refused (401) until someone
noticed. The shipped file is the laptop's config: its token is the file scripts/serve writes, named
relative to the config file's directory as AlertManager resolves it. Run for real: scripts/serve in a copy
of the tree, a real AlertManager on the shipped file where scripts/serve's tree has it (only its webhook
URL pointed at the test's port), and a firing alert that remediate records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests
import yaml

from remediate.config.durations import parse_duration
from tests.support.realsystems import AlertManager, free_port
from tests.support.serve_script import ROOT, serve_tree, start_serve_script
from tests.support.server import WAIT, write_playbook
from tests.support.waiting import scaled, wait_until

SHIPPED = ROOT / "alertmanager" / "alertmanager.yml"
ALERTNAME = "GPUTemperatureHigh"  # one the shipped route sends to remediate
PLAYBOOK = f"""\
name: laptop-check
match: {{alertname: [{ALERTNAME}]}}
steps:
  - action: log
    with: {{message: "seen {{{{ labels.alertname }}}}"}}
"""


class ShippedAlertManager(AlertManager):
    """AlertManager on the shipped file, written where `tree` has it, with only the webhook URL changed."""

    def __init__(self, tree: Path, webhook_url: str) -> None:
        super().__init__(tree / "alertmanager", webhook_url, token=None)

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
        for receiver in config["receivers"]:
            for webhook in receiver.get("webhook_configs", []):
                webhook["url"] = self.webhook_url
        return config


def _remediate_webhook() -> dict[str, Any]:
    (receiver,) = [r for r in yaml.safe_load(SHIPPED.read_text())["receivers"] if r["name"] == "remediate"]
    (webhook,) = receiver["webhook_configs"]
    return dict(webhook)


def _remediate_route() -> dict[str, Any]:
    (route,) = [r for r in yaml.safe_load(SHIPPED.read_text())["route"]["routes"] if r["receiver"] == "remediate"]
    return dict(route)


def test_the_shipped_config_names_the_token_file_scripts_serve_writes() -> None:
    credentials = Path(_remediate_webhook()["http_config"]["authorization"]["credentials_file"])
    assert not credentials.is_absolute(), "a laptop has no /etc/remediate: name the file scripts/serve writes"
    # AlertManager resolves a relative credentials_file against the config file's directory.
    assert (SHIPPED.parent / credentials).resolve() == ROOT / "remediate.token"
    assert "remediate.token" in (ROOT / "scripts" / "serve").read_text()


def test_alertmanager_on_the_shipped_config_posts_to_scripts_serve_with_its_token(tmp_path: Path) -> None:
    tree = serve_tree(tmp_path / "tree")
    (tree / "alertmanager").mkdir()
    write_playbook(tree / "playbooks", "laptop-check", PLAYBOOK)
    base = f"http://127.0.0.1:{free_port()}"
    serve = start_serve_script(
        tree,
        tmp_path / "serve.log",
        "--bind",
        base.removeprefix("http://"),
        "--workers",
        "1",
        "--database-url",
        f"sqlite:///{tmp_path / 'r.db'}",
    )
    am = ShippedAlertManager(tree, f"{base}/webhook")
    try:

        def ready() -> bool:
            assert serve.process.poll() is None, serve.log()
            try:
                return requests.get(f"{base}/readyz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, WAIT, message="scripts/serve never became ready")
        assert (tree / "remediate.token").is_file(), serve.log()
        operator = (tree / "remediate.operator-token").read_text().strip()
        am.start()
        am.fire({"alertname": ALERTNAME, "severity": "warning", "Hostname": "gpu-node-1", "UUID": "GPU-1"})

        def recorded() -> list[dict[str, Any]]:
            response = requests.get(
                f"{base}/history",
                params={"alertname": ALERTNAME},
                headers={"Authorization": f"Bearer {operator}"},
                timeout=scaled(5),
            )
            assert response.status_code == 200, response.text
            entries: list[dict[str, Any]] = response.json()["entries"]
            return entries

        group_wait = parse_duration(_remediate_route()["group_wait"]).total_seconds()
        entries = wait_until(
            recorded,
            group_wait + WAIT,
            message=f"AlertManager's post was not recorded; its log:\n{am.log_tail()}\nserve:\n{serve.log()}",
        )
        assert [e["playbook"] for e in entries] == ["laptop-check"]
    finally:
        am.stop()
        serve.stop()
