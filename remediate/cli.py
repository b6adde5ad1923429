"""The `remediate` command. Thin click commands; heavy imports happen inside them.

Every command takes --config / --playbooks / --database-url (and the client
commands --server URL to talk to a running server instead of the database).
Errors are one line on stderr and exit code 2; never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from remediate.errors import ConfigError, RemediateError

EXIT_WOULD_RUN = 0
EXIT_NOTHING_WOULD_RUN = 1
EXIT_ERROR = 2


class CliError(click.ClickException):
    """A one-line error for the user; exit code 2 (1 means 'nothing would run' for dry-run)."""

    exit_code = EXIT_ERROR


def _fail(message: str) -> None:
    raise CliError(message)


def _settings(ctx_params: dict[str, Any], **extra: Any) -> Any:
    from remediate.config import load_settings

    overrides = {
        "playbooks": ctx_params.get("playbooks"),
        "database_url": ctx_params.get("database_url"),
        "token_file": ctx_params.get("token_file"),
        "gpu_backend": ctx_params.get("gpu_backend"),
        "gpu_simulator_file": ctx_params.get("gpu_simulator_file"),
        **extra,
    }
    return load_settings(config_file=ctx_params.get("config"), overrides=overrides)


def common_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file."),
        click.option("--playbooks", type=click.Path(path_type=Path), help="Playbook directory [./playbooks]."),
        click.option("--database-url", help="SQLAlchemy URL of the store [sqlite:///remediate.db]."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def client_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--server",
            metavar="URL",
            envvar="REMEDIATE_SERVER",
            help="Talk to a running server (e.g. http://127.0.0.1:9095) instead of the database.",
        ),
        click.option(
            "--token-file",
            type=click.Path(path_type=Path, dir_okay=False),
            help="File holding the bearer token (default: $REMEDIATE_TOKEN).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def gpu_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--gpu-backend",
            type=click.Choice(["nvml", "simulated"]),
            help="GPU backend: nvml (the driver) or simulated (a device file; only ever chosen explicitly) [nvml].",
        ),
        click.option(
            "--gpu-simulator-file",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Device file of the simulated GPU backend (YAML/JSON).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def handle_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import requests
        import sqlalchemy

        try:
            return function(*args, **kwargs)
        except RemediateError as exc:
            raise CliError(str(exc)) from exc
        except requests.ConnectionError as exc:
            raise CliError(f"cannot reach the server: {exc}") from exc
        except requests.RequestException as exc:
            # A --server without http://, a timeout, ...: still one line, never a traceback.
            raise CliError(f"request to the server failed: {exc}") from exc
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise CliError(f"database error: {getattr(exc, 'orig', exc)}") from exc

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="remediate")
def main() -> None:
    """Turn Prometheus AlertManager alerts into safe, audited fixes.

    Settings come from (lowest to highest): defaults, --config FILE (or $REMEDIATE_CONFIG),
    REMEDIATE_* environment variables, then command-line flags.
    """


# --------------------------------------------------------------------------- serve


@main.command()
@common_options
@gpu_options
@click.option("--bind", help="host:port to listen on [127.0.0.1:9095].")
@click.option("--workers", type=click.IntRange(1, 64), help="gunicorn worker processes [2].")
@click.option("--threads", type=click.IntRange(1, 64), help="Threads per worker (>1 uses gthread) [1].")
@click.option("--executor-threads", type=click.IntRange(0, 64), help="Executor threads per worker [2].")
@click.option("--mode", type=click.Choice(["enforce", "dry-run"]), help="dry-run = shadow mode: only plan.")
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding the bearer token (or set $REMEDIATE_TOKEN).",
)
@click.option(
    "--insecure-no-auth", is_flag=True, default=None, help="Serve without a token. Only for local experiments."
)
@handle_errors
def serve(**params: Any) -> None:
    """Run the server under gunicorn: webhook receiver, executor, history API."""
    settings = _settings(
        params,
        bind=params["bind"],
        workers=params["workers"],
        threads=params["threads"],
        executor_threads=params["executor_threads"],
        mode=params["mode"],
        insecure_no_auth=params["insecure_no_auth"],
    )
    from remediate.serving import run_server

    run_server(settings)


# --------------------------------------------------------------------------- agent


@main.command()
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file.")
@gpu_options
@click.option("--bind", "agent_bind", help="host:port to listen on [127.0.0.1:9096].")
@click.option(
    "--token-file",
    "agent_token_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding the agent token the server sends (or set $REMEDIATE_AGENT_TOKEN).",
)
@click.option("--node-name", help="This node's name: the only target it runs steps for [the host name].")
@click.option(
    "--state-file",
    "agent_state_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="SQLite file of what node actions remember [./remediate-agent.db].",
)
@click.option(
    "--policies-file",
    "cleanup_policies_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="This node's cleanup policies file (disk.cleanup).",
)
@click.option("--power-floor-watts", "gpu_power_floor_watts", type=float, help="Refuse GPU power limits below this.")
@click.option("--threads", "agent_threads", type=click.IntRange(1, 256), help="Steps it runs at once [8].")
@click.option(
    "--insecure-no-auth", is_flag=True, default=None, help="Serve without a token. Only for local experiments."
)
@handle_errors
def agent(**params: Any) -> None:
    """Run the node agent: plans and executes node-local steps (gpu.*, disk.*, training.*) sent by the
    server for this node, within this node's own limits."""
    settings = _settings(
        params,
        **{
            key: params[key]
            for key in (
                "agent_bind",
                "agent_token_file",
                "node_name",
                "agent_state_file",
                "cleanup_policies_file",
                "gpu_power_floor_watts",
                "agent_threads",
                "insecure_no_auth",
            )
        },
    )
    from remediate.agent import run_agent

    run_agent(settings)


# --------------------------------------------------------------------------- playbooks


@main.group()
def playbooks() -> None:
    """List and validate playbooks."""


@playbooks.command("list")
@common_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def playbooks_list(as_json: bool, **params: Any) -> None:
    """List the playbooks of the playbook directory."""
    from remediate.actions import default_registry
    from remediate.playbooks import load_playbooks

    settings = _settings(params)
    loaded = load_playbooks(settings.playbooks, default_registry(settings))
    rows = [
        {
            "name": p.name,
            "alertnames": list(p.alertnames),
            "matchers": [str(m) for m in p.matchers],
            "mode": p.mode.value,
            "cooldown_seconds": p.cooldown.total_seconds(),
            "max_attempts": p.max_attempts,
            "steps": [s.action for s in p.steps],
            "on_resolved": [s.action for s in p.on_resolved],
            "file": p.source,
        }
        for p in loaded.playbooks
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    _table(
        [
            [
                r["name"],
                ",".join(r["alertnames"]),
                r["mode"],
                " -> ".join(r["steps"]),
                " -> ".join(r["on_resolved"]) or "-",
            ]
            for r in rows
        ],
        ["NAME", "ALERTS", "MODE", "STEPS", "ON RESOLVED"],
    )


@playbooks.command("validate")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file.")
@handle_errors
def playbooks_validate(directory: Path | None, config: Path | None) -> None:
    """Validate every playbook in DIRECTORY (default: the configured playbook directory)."""
    from remediate.actions import default_registry
    from remediate.playbooks import load_directory

    if directory is None:
        directory = _settings({"config": config}).playbooks
    loaded, errors = load_directory(directory, default_registry())
    for playbook in loaded:
        click.echo(f"ok      {playbook.source} ({playbook.name})")
    for error in errors:
        click.echo(f"error   {error}", err=True)
    if errors:
        raise SystemExit(1)
    if not loaded:
        click.echo(f"error   no playbooks (*.yaml, *.yml) in {directory}", err=True)
        raise SystemExit(1)
    click.echo(f"{len(loaded)} playbooks valid")


# --------------------------------------------------------------------------- dry-run


@main.command("dry-run")
@common_options
@gpu_options
@click.argument("payload", required=False, type=click.Path(path_type=Path, dir_okay=False, allow_dash=True))
@click.option("--alertname", help="Build a one-alert notification with this alertname instead of PAYLOAD.")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Label of the built alert (repeatable).")
@click.option("--annotation", "annotations", multiple=True, metavar="K=V", help="Annotation (repeatable).")
@click.option("--status", type=click.Choice(["firing", "resolved"]), default="firing", show_default=True)
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
    and each step's plan. Writes nothing.

    Exit code: 0 if at least one run would start, 1 if nothing would run, 2 on errors.
    """
    from remediate.dryrun import dry_run as run_dry

    if (payload is None) == (alertname is None):
        _fail("give either PAYLOAD.json (or - for stdin) or --alertname with --label K=V ...")
    if payload is not None:
        text = sys.stdin.read() if str(payload) == "-" else _read(payload)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            _fail(f"{payload} is not valid JSON: {exc}")
    else:
        data = _built_notification(alertname or "", labels, annotations, status)
    settings = _settings(params)
    report = run_dry(settings, data, now=time.time())
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        _print_dry_run(report)
    raise SystemExit(EXIT_WOULD_RUN if report["would_run"] else EXIT_NOTHING_WOULD_RUN)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc


def _pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--{what} takes KEY=VALUE, got {item!r}")
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
            for step in pb["steps"]:
                click.echo(f"    step {step['index']} {step['name']} [{step['action']} @ {step['where']}]")
                click.echo(f"      params: {json.dumps(step['params'], default=str)}")
                if step.get("plan_error"):
                    click.echo(f"      plan failed: {step['plan_error']}")
                else:
                    click.echo(f"      plan: {json.dumps(step['plan'], default=str)}")
    click.echo("\nwould run: " + ("yes" if report["would_run"] else "no"))


# --------------------------------------------------------------------------- actions


@main.command("actions")
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the reference of docs/playbooks.md.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def actions(config: Path | None, as_markdown: bool, as_json: bool) -> None:
    """List the actions playbook steps can call: where they run and their params."""
    from remediate.actions import default_registry
    from remediate.actions.reference import markdown, reference

    registry = default_registry(_settings({"config": config}))
    if as_markdown:
        click.echo(markdown(registry), nl=False)
        return
    entries = reference(registry)
    if as_json:
        click.echo(json.dumps(entries, indent=2, default=str))
        return
    _table(
        [[e["name"], e["where"], ", ".join(p["name"] for p in e["params"]) or "-"] for e in entries],
        ["ACTION", "WHERE", "PARAMS"],
    )


# --------------------------------------------------------------------------- gpu


@main.group()
def gpu() -> None:
    """Look at this node's GPUs."""


@gpu.command("status")
@click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file.")
@gpu_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per GPU).")
@handle_errors
def gpu_status(as_json: bool, **params: Any) -> None:
    """Show every GPU of this node: power usage, limit, default, constraints, temperature, processes."""
    from remediate.gpu import open_backend

    settings = _settings(params)
    gpus = open_backend(settings.gpu_backend, simulator_file=settings.gpu_simulator_file).devices()
    if as_json:
        click.echo(json.dumps([g.to_dict() for g in gpus], indent=2))
        return
    _table(
        [
            [
                g.index,
                g.uuid,
                g.name,
                _watts(g.power_usage_mw),
                _watts(g.power_limit_mw),
                _watts(g.default_limit_mw),
                f"{_watts(g.min_limit_mw)}-{_watts(g.max_limit_mw)}",
                "-" if g.temperature_c is None else f"{g.temperature_c} C",
                ",".join(str(p.pid) for p in g.processes) or "-",
            ]
            for g in gpus
        ],
        ["INDEX", "UUID", "NAME", "POWER W", "LIMIT W", "DEFAULT W", "MIN-MAX W", "TEMP", "PROCESSES"],
    )


def _watts(milliwatts: int | None) -> str:
    return "-" if milliwatts is None else f"{milliwatts / 1000:g}"


# --------------------------------------------------------------------------- history, approve, pause


def _client(params: dict[str, Any]) -> Any:
    from remediate.client import Client

    token = os.environ.get("REMEDIATE_TOKEN")
    if params.get("token_file"):
        token = _read(params["token_file"]).strip()
    return Client(params["server"], token)


@main.command()
@common_options
@client_options
@click.option("--playbook", help="Only this playbook.")
@click.option("--alertname", help="Only this alert name.")
@click.option("--target", "--node", "target", help="Only this target (node).")
@click.option("--status", help="Only this status (succeeded, failed, queued, cooldown, duplicate, ...).")
@click.option("--since", help="RFC 3339 time or UNIX seconds.")
@click.option("--until", help="RFC 3339 time or UNIX seconds.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--cursor", help="next_cursor of a previous page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def history(as_json: bool, **params: Any) -> None:
    """Show the audit history, newest first (from the database, or a server with --server)."""
    filters = {
        k: params[k]
        for k in ("playbook", "alertname", "target", "status", "since", "until", "limit", "cursor")
        if params.get(k) is not None
    }
    if params.get("server"):
        page = _client(params).history(filters)
    else:
        from remediate.server import parse_time_arg
        from remediate.store import HistoryQuery

        store = _open_store(params)
        try:
            query = HistoryQuery(
                **{
                    **{k: v for k, v in filters.items() if k not in ("since", "until")},
                    "since": parse_time_arg(filters.get("since"), "since"),
                    "until": parse_time_arg(filters.get("until"), "until"),
                }
            )
            entries, cursor = store.history(query)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        page = {"entries": entries, "next_cursor": cursor}
    if as_json:
        click.echo(json.dumps(page, indent=2))
        return
    _table(
        [
            [
                e["id"],
                _when(e["time"]),
                e["alertname"],
                e.get("playbook") or "-",
                e.get("target") or "-",
                e["status"],
                e.get("run_id") or "-",
                _short(e["reason"]),
            ]
            for e in page["entries"]
        ],
        ["ID", "TIME", "ALERT", "PLAYBOOK", "TARGET", "STATUS", "RUN", "REASON"],
    )
    if page.get("next_cursor"):
        click.echo(f"more: --cursor {page['next_cursor']}")


@main.command()
@common_options
@client_options
@click.argument("run_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def show(run_id: int, as_json: bool, **params: Any) -> None:
    """Show one run: its alert, decision, steps, plans, results and attempts."""
    detail = _client(params).run(run_id) if params.get("server") else _open_store(params).run_detail(run_id)
    if as_json:
        click.echo(json.dumps(detail, indent=2))
        return
    click.echo(
        f"run {detail['id']}: {detail['playbook']} on {detail['target']} ({detail['phase']}, "
        f"{detail['mode']}) -> {detail['status']}"
    )
    if detail.get("error"):
        click.echo(f"error: {detail['error']}")
    click.echo(f"alert: {detail['alert']['labels']}")
    for step in detail["steps"]:
        click.echo(f"  step {step['index']} {step['name']} [{step['action']}] {step['status']}")
        for key in ("plan", "result", "error"):
            if step.get(key) is not None:
                click.echo(f"    {key}: {json.dumps(step[key], default=str)}")


@main.command()
@common_options
@client_options
@click.argument("run_id", type=int)
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who approves (recorded).")
@handle_errors
def approve(run_id: int, by: str, **params: Any) -> None:
    """Approve a run that waits in awaiting_approval."""
    if params.get("server"):
        _client(params).approve(run_id, by)
    else:
        _open_store(params).approve(run_id, by=by, now=time.time())
    click.echo(f"run {run_id} approved by {by}; it is queued")


@main.command()
@common_options
@client_options
@click.option("--reason", default="", help="Why (recorded with every refused alert).")
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who pauses (recorded).")
@handle_errors
def pause(reason: str, by: str, **params: Any) -> None:
    """Pause remediation: new alerts are recorded but no run starts."""
    if params.get("server"):
        _client(params).pause(reason, by)
    else:
        _open_store(params).set_paused(True, by=by, reason=reason, now=time.time())
    click.echo("remediation paused" + (f": {reason}" if reason else ""))


@main.command()
@common_options
@client_options
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who resumes (recorded).")
@handle_errors
def resume(by: str, **params: Any) -> None:
    """Resume remediation after `remediate pause`."""
    if params.get("server"):
        _client(params).resume(by)
    else:
        _open_store(params).set_paused(False, by=by, reason="", now=time.time())
    click.echo("remediation resumed")


# --------------------------------------------------------------------------- circuit breaker


@main.group()
def breaker() -> None:
    """The circuit breaker of cluster actions (cordon, taint, drain): status and reset."""


def _breaker(params: dict[str, Any]) -> Any:
    from remediate.breaker import CircuitBreaker, limits_from_settings

    store = _open_store(params)
    return CircuitBreaker(store.breaker_ledger, store.breaker_view, limits=limits_from_settings(_settings(params)))


@breaker.command("status")
@common_options
@client_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def breaker_status(as_json: bool, **params: Any) -> None:
    """Show whether the breaker is open, why, and which nodes remediate holds."""
    status = _client(params).breaker_status() if params.get("server") else _breaker(params).status()
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    _print_breaker(status)


@breaker.command("reset")
@common_options
@client_options
@click.option("--reason", default="", help="Why (recorded).")
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who resets (recorded).")
@handle_errors
def breaker_reset(reason: str, by: str, **params: Any) -> None:
    """Close the breaker after checking the nodes it names; older alerts are then recorded as stale."""
    if params.get("server"):
        status = _client(params).breaker_reset(by, reason)
    else:
        status = _breaker(params).reset(by=by, reason=reason)
    click.echo(f"circuit breaker reset by {by}" + (f": {reason}" if reason else ""))
    _print_breaker(status)


def _print_breaker(status: dict[str, Any]) -> None:
    if status["open"]:
        click.echo(
            f"breaker: OPEN since {_when(status['tripped_at'])} (run {status['tripped_by_run']}, "
            f"node {status['tripped_node']})"
        )
        click.echo(f"reason: {status['reason']}")
        click.echo(f"refused since: {status['refused']}")
    else:
        click.echo("breaker: closed")
    held, recent = status["held_nodes"], status["recent_nodes"]
    click.echo(f"held by remediate now ({len(held)}): {', '.join(held) or '-'}")
    window = status["limits"]["window_seconds"]
    click.echo(f"changed within {window:g}s ({len(recent)}): {', '.join(recent) or '-'}")
    click.echo(f"cap: {status['cap_rule']}")
    if status.get("reset_at"):
        why = f": {status['reset_reason']}" if status.get("reset_reason") else ""
        click.echo(f"last reset: {_when(status['reset_at'])} by {status['reset_by']}{why}")


def _open_store(params: dict[str, Any]) -> Any:
    from remediate.dryrun import sqlite_path
    from remediate.store import Store

    url = _settings(params).database_url
    path = sqlite_path(url)
    if path is not None and not path.exists():
        _fail(f"no database at {path}: start the server first, or pass --database-url / --server")
    return Store.open(url)


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(rows: list[list[Any]], headers: list[str]) -> None:
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if not rows:
        click.echo("(nothing)")


# --------------------------------------------------------------------------- disk


def _disk_options(function: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--config", type=click.Path(path_type=Path, dir_okay=False), help="YAML config file."),
        click.option(
            "--policies-file",
            "cleanup_policies_file",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Cleanup policies file [$REMEDIATE_CLEANUP_POLICIES_FILE / cleanup_policies_file].",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@main.group()
def disk() -> None:
    """Check this node's cleanup policies and see what a cleanup would delete."""


@disk.command("policies")
@_disk_options
@handle_errors
def disk_policies(as_json: bool, **params: Any) -> None:
    """Validate the cleanup policies file and list its policies."""
    from remediate.disk import PolicySource

    settings = _settings(params, cleanup_policies_file=params["cleanup_policies_file"])
    policies = PolicySource(settings.cleanup_policies_file)()
    rows = [p.to_dict() for p in policies]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    _table(
        [
            [
                r["name"],
                r["mountpoint"],
                ",".join(r["roots"]),
                ",".join(r["patterns"]),
                r["min_age"],
                r["keep_newest"],
                r["max_files"] or "-",
                r["max_bytes"] or "-",
            ]
            for r in rows
        ],
        ["NAME", "MOUNTPOINT", "ROOTS", "PATTERNS", "MIN AGE", "KEEP", "MAX FILES", "MAX BYTES"],
    )


@disk.command("plan")
@_disk_options
@click.option("--policy", help="Policy name.")
@click.option("--mountpoint", help="Pick the policy serving this mountpoint (exact match).")
@click.option("--free-percent", type=float, help="Target: this % of the filesystem free.")
@click.option("--free-bytes", help="Target: this much free (bytes or e.g. 50GiB).")
@click.option("--max-files", type=int, help="Lower the policy's cap on files.")
@click.option("--max-bytes", help="Lower the policy's cap on bytes.")
@handle_errors
def disk_plan(as_json: bool, **params: Any) -> None:
    """Show what disk.cleanup would delete here, in order, and why it would stop. Changes nothing."""
    from remediate.actions import StepContext, default_registry

    settings = _settings(params, cleanup_policies_file=params["cleanup_policies_file"])
    action = default_registry(settings).get("disk.cleanup")
    step = {k: params[k] for k in ("policy", "mountpoint", "free_percent", "free_bytes", "max_files", "max_bytes")}
    checked = action.validate({k: v for k, v in step.items() if v is not None})
    plan = action.plan(checked, StepContext(run_id=0, step_index=0, playbook="(cli)", target="(local)", alert={}))
    if as_json:
        click.echo(json.dumps(plan, indent=2))
        return
    for entry in plan["would_delete"]:
        click.echo(f"delete    {entry['modified']}  {entry['size']:>14}  {entry['path']}")
    for entry in plan["would_truncate"]:
        click.echo(f"truncate  {entry['size']:>14} -> {entry['keep_bytes']}  {entry['path']}")
    for note in plan["notes"]:
        click.echo(f"note: {note}")
    click.echo(plan["summary"])
