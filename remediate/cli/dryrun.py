"""`remediate dry-run`: what an alert would do, from a payload file or a built one-alert notification;
writes nothing."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from remediate.cli._common import (
    EXIT_NOTHING_WOULD_RUN,
    EXIT_WOULD_RUN,
    CliError,
    _read,
    _settings,
    common_options,
    gpu_options,
    handle_errors,
    print_json,
)
from remediate.cli._group import main


@main.command("dry-run")
@common_options
@gpu_options
@click.argument("payload", required=False, type=click.Path(path_type=Path, dir_okay=False, allow_dash=True))
@click.option("--alertname", help="Build a one-alert notification with this alertname instead of PAYLOAD.")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Label of the built alert (repeatable).")
@click.option("--annotation", "annotations", multiple=True, metavar="K=V", help="Annotation (repeatable).")
@click.option("--status", type=click.Choice(["firing", "resolved"]), default="firing", show_default=True)
@click.option(
    "--mode",
    type=click.Choice(["enforce", "dry-run"]),
    help="Judge in this server mode (as `serve --mode`); default: the config's, else enforce.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def dry_run(
    payload: Path | None,
    alertname: str | None,
    labels: tuple[str, ...],
    annotations: tuple[str, ...],
    status: str,
    as_json: bool,
    **params: Any,
) -> None:
    """Show what an alert would do: matched playbooks, each guard's decision against the real store,
    and each step's plan. Writes nothing. Reads the database and playbooks given here (or in --config):
    point them at the server's to judge as it would. The first line says which server mode it judged in
    and where that came from (--mode, $REMEDIATE_MODE, the config file, or the default, enforce): a server
    started by scripts/serve or the chart runs in dry-run (shadow mode) unless a mode was chosen.

    \b
    Exit code:
      0  a run would start, and every run that would start can succeed
      1  nothing would run (no playbook accepts the alert), or a run that would start cannot
         succeed: a step's plan fails (e.g. no registered training job by that name, a node
         that is not this host) or says can_act: false (e.g. the job's process is gone, no
         checkpoint fits the rollback); the last line says which and why
      2  errors (bad arguments, an unreadable payload, playbooks or database)
    """
    from remediate.rehearsal.dryrun import dry_run as run_dry

    if (payload is None) == (alertname is None):
        raise CliError("give either PAYLOAD.json (or - for stdin) or --alertname with --label K=V ...")
    if payload is not None:
        text = sys.stdin.read() if str(payload) == "-" else _read(payload)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{payload} is not valid JSON: {exc}") from exc
    else:
        data = _built_notification(alertname or "", labels, annotations, status)
    settings = _settings(params, mode=params.get("mode"))
    report = {"mode": _mode_of(settings, params.get("mode")), **run_dry(settings, data, now=time.time())}
    if not print_json(report, as_json):
        _print_dry_run(report)
    succeeds = report["would_run"] and not report["cannot_succeed"]
    raise SystemExit(EXIT_WOULD_RUN if succeeds else EXIT_NOTHING_WOULD_RUN)


def _mode_of(settings: Any, flag: str | None) -> dict[str, str]:
    """The server mode judged in and where it came from, by the precedence of the settings (defaults < config
    file < environment < flags): the mode a dry-run judges in is only the server's when both read the same."""
    from remediate.config.settings import read_config_file

    if flag:
        source = "--mode"
    elif os.environ.get("REMEDIATE_MODE"):
        source = "$REMEDIATE_MODE"
    elif settings.server.config_file and "mode" in read_config_file(settings.server.config_file):
        source = f"config file {settings.server.config_file}"
    else:
        source = "default"
    return {"server": settings.engine.mode, "from": source}


def _pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--{what} takes KEY=VALUE, got {item!r}")
        result[key] = value
    return result


def _built_notification(
    alertname: str, labels: tuple[str, ...], annotations: tuple[str, ...], status: str
) -> dict[str, Any]:
    label_map = {"alertname": alertname, **_pairs(labels, "label")}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    import hashlib

    fingerprint = hashlib.sha256(json.dumps(label_map, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "version": "4",
        "status": status,
        "receiver": "dry-run",
        "groupKey": "{}",
        "truncatedAlerts": 0,
        "groupLabels": {"alertname": alertname},
        "commonLabels": label_map,
        "commonAnnotations": _pairs(annotations, "annotation"),
        "externalURL": "",
        "alerts": [
            {
                "status": status,
                "labels": label_map,
                "annotations": _pairs(annotations, "annotation"),
                "startsAt": now,
                "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else now,
                "generatorURL": "",
                "fingerprint": fingerprint,
            }
        ],
    }


def _print_dry_run(report: dict[str, Any]) -> None:
    mode = report["mode"]
    if mode["from"] == "default":
        where = (
            "the default; a server started by scripts/serve or the chart runs in dry-run (shadow mode) unless a "
            "mode was chosen: give its --config, or --mode, to judge as it does"
        )
    else:
        where = f"from {mode['from']}"
    click.echo(f"judged in server mode {mode['server']} ({where})")
    last = _last_line(report)
    errors = _Errors(last)
    click.echo(f"store: {report['store']}")
    if report["paused"]:
        click.echo("remediation is PAUSED: nothing would run")
    for entry in report["alerts"]:
        alert = entry["alert"]
        click.echo(f"\nalert {alert['alertname']} ({alert['status']}, fingerprint {alert['fingerprint']})")
        if not entry["playbooks"]:
            click.echo("  no playbook matches")
        for pb in entry["playbooks"]:
            click.echo(f"  playbook {pb['playbook']} -> target {pb['target']}, mode {pb['mode']}")
            click.echo(f"    decision: {pb['decision']} ({pb['reason']})")
            if pb.get("wave"):
                click.echo(f"    rollout: {pb['wave']}")
            if pb.get("ladder"):
                rung = pb["ladder"]
                click.echo(f"    ladder: rung {rung['rung']} of {rung['of']} ({rung['name']}) would run: {rung['why']}")
            if pb.get("cannot_act") and pb.get("every_step_cannot_act"):
                click.echo("    nothing would change: every step's plan says it cannot act (each step says why)")
            elif pb.get("cannot_act"):
                click.echo("    the run cannot succeed: a step's plan says it cannot act (each step says why)")
            for step in pb["steps"]:
                on = f" on {step['node']}" if step.get("node") else ""  # the node a node step would run on
                click.echo(f"    step {step['index']} {step['name']} [{step['action']} @ {step['where']}]{on}")
                click.echo(f"      params: {json.dumps(step['params'], default=str)}")
                if step.get("plan_error"):
                    where = f"step {step['index']} {step['name']}"
                    click.echo(f"      plan failed: {errors.shown(step['plan_error'], where)}")
                else:
                    click.echo(f"      plan: {json.dumps(step['plan'], default=str)}")
            for left_out in pb.get("left_out", ()):
                click.echo(f"    left out {left_out}")
    click.echo(f"\n{last}")


class _Errors:
    """Each plan error in full once: a long one (no cluster configured) repeated by every k8s step was printed
    once per step, then again in the summaries. The last line keeps the reasons it gives in full (it is what
    `| tail -1` reads); a step whose error is there, or was printed for an earlier step, refers to it."""

    def __init__(self, last: str) -> None:
        self.last = last
        self.first: dict[str, str] = {}

    def shown(self, error: str, where: str) -> str:
        kind = error.split(":", 1)[0]
        if error in self.last:
            return f"{kind} (the last line says why)"
        if error in self.first:
            return f"{kind} (as {self.first[error]})"
        self.first[error] = where
        return error


def _last_line(report: dict[str, Any]) -> str:
    if not report["would_run"]:
        return f"would run: no ({_why_not(report)})"
    if report["cannot_succeed"]:
        return f"would run: yes, but cannot succeed ({'; '.join(report['cannot_succeed'])})"
    return "would run: yes"


def _why_not(report: dict[str, Any]) -> str:
    """The one-line reason nothing would run, for the last line."""
    if report["paused"]:
        return "remediation is paused"
    entries = [pb for entry in report["alerts"] for pb in entry["playbooks"]]
    if not entries:
        return "no playbook matches"
    blocked = [pb for pb in entries if pb.get("cannot_act")]
    if blocked:
        return f"playbook {blocked[0]['playbook']}: {blocked[0]['cannot_act']}"
    return f"playbook {entries[0]['playbook']}: {entries[0]['decision']}"
