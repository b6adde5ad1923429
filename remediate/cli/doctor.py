"""`remediate doctor`: check what remediate's fixes depend on (remediate.doctor); exit by the worst check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from remediate.cli._common import _client, _settings, client_options, handle_errors, print_json
from remediate.cli._group import main

_MARK = {"OK": "OK  ", "WARN": "WARN", "FAIL": "FAIL"}


@main.command()
@client_options
@click.option(
    "--rules",
    type=click.Path(path_type=Path, exists=True),
    help="Prometheus rule file, or directory of *.rules.yml, to check [the rule_files setting].",
)
@click.option("--prometheus-url", metavar="URL", help="The Prometheus to ask [the prometheus_url setting].")
@click.option("--alertmanager-url", metavar="URL", help="The AlertManager to read [the alertmanager_url setting].")
@click.option("--timeout", type=click.FloatRange(0.1, 120), default=5.0, show_default=True, help="Seconds per request.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (what GET /doctor answers).")
@handle_errors
def doctor(rules: Path | None, timeout: float, as_json: bool, **params: Any) -> None:
    """Check that what remediate's fixes depend on works: the series the rules and check.prometheus steps read
    (fresh in Prometheus; the dcgm-exporter generation a DCGM name suggests), AlertManager's routes to this server
    and their repeat_interval, the sinks, the cluster's permissions, the tokens.

    Each check prints OK, WARN or FAIL with the fix in one line; nothing is changed and nothing is sent
    but GET and HEAD requests. With --server, the server runs them (GET /doctor: its settings and the playbooks
    it holds). Exit code by the worst: 0 all OK, 1 a warning, 2 a failure (docs/doctor.md)."""
    from remediate.doctor import EXIT_CODES, Status

    report = _client(params).doctor() if params.get("server") else _local_report(rules, timeout, params)
    if not print_json(report, as_json):
        for check in report["checks"]:
            click.echo(f"{_MARK[check['status']]}  {check['name']}: {check['detail']}")
            if check["fix"]:
                click.echo(f"      fix: {check['fix']}")
        counts = {status: sum(1 for c in report["checks"] if c["status"] == status) for status in _MARK}
        click.echo(f"doctor: {counts['OK']} OK, {counts['WARN']} WARN, {counts['FAIL']} FAIL")
    raise SystemExit(EXIT_CODES[Status[report["status"]]])


def _local_report(rules: Path | None, timeout: float, params: dict[str, Any]) -> dict[str, Any]:
    """The checks run here, with this command's settings and the playbook directory's playbooks."""
    from remediate.doctor import Inputs, report_json, run_checks
    from remediate.doctor.probe import Probe
    from remediate.doctor.run import load_playbooks

    settings = _settings(
        params, prometheus_url=params.get("prometheus_url"), alertmanager_url=params.get("alertmanager_url")
    )
    playbooks, checks = load_playbooks(settings)
    where = rules if rules is not None else settings.prometheus.rule_files
    checks += run_checks(Inputs(settings, playbooks, where, Probe(timeout=timeout)))
    return report_json(checks)
