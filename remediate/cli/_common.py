"""What the command modules share: exit codes, CliError and handle_errors (one-line errors, never a
traceback), the option decorators (--config/--playbooks/--database-url, --server/--token-file, the GPU
backend), _settings, opening the store or a server client, and table/time formatting.

Heavy imports (sqlalchemy, requests, the store, the client) happen inside the functions.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from remediate.errors import (
    AlreadyPaused,
    ConfigError,
    NotPaused,
    RemediateError,
    RunStateError,
    UnknownRunError,
)

EXIT_WOULD_RUN = 0
EXIT_NOTHING_WOULD_RUN = 1
"""dry-run's only: nothing would run (or a run that would start cannot succeed)."""
EXIT_ERROR = 2
"""A usage error (click's own code) or any error not below: a bad value, an unreadable file, no server or database."""
EXIT_NOT_FOUND = 3
"""No such run, or no ladder of that target (`show 999`; HTTP 404)."""
EXIT_REFUSED = 4
"""Refused: no or the wrong token (HTTP 401/403), or the run or pause is not in a state that allows it (HTTP 409)."""

EXIT_RUN_FAILED = 5
"""`approve --wait`: the run finished without succeeding (failed, rejected, cancelled)."""
EXIT_WAIT_TIMED_OUT = 6
"""`approve --wait`: the run had not finished within --timeout."""
EXIT_GATE_FAILED = 7
"""`node release`: the re-admission gate failed, or could not run (no agent, no NVML): nothing was released."""

_EXIT_OF_STATUS = {401: EXIT_REFUSED, 403: EXIT_REFUSED, 404: EXIT_NOT_FOUND, 409: EXIT_REFUSED}

TOKEN_FILES_OF_SCRIPTS_SERVE = ("remediate.operator-token", "remediate.token")
"""What `scripts/serve` writes into its working directory (the operator token, the webhook token): a client
command given no token reads the first of them found in its own working directory."""

HINT_OF_401 = (
    "give a token: --token-file FILE, or REMEDIATE_OPERATOR_TOKEN / REMEDIATE_OPERATOR_TOKEN_FILE (approve, pause, "
    "resume and resets need the operator token), or REMEDIATE_TOKEN / REMEDIATE_TOKEN_FILE; in the directory "
    "`scripts/serve` ran in, ./remediate.operator-token is read by itself"
)


class CliError(click.ClickException):
    """A one-line error for the user; exit code 2 unless another is given (EXIT_*; 1 is only dry-run's)."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _settings(ctx_params: dict[str, Any], **extra: Any) -> Any:
    from remediate.config.settings import load_settings

    overrides = {
        "playbooks": ctx_params.get("playbooks"),
        "database_url": ctx_params.get("database_url"),
        "token_file": ctx_params.get("token_file"),
        "gpu_backend": ctx_params.get("gpu_backend"),
        "gpu_simulator_file": ctx_params.get("gpu_simulator_file"),
        **extra,
    }
    if ctx_params.get("token_file"):
        # A --token-file given on the command line wins over $REMEDIATE_TOKEN (a token value beats a
        # token file at the same level): the flag is the most specific thing the user said.
        overrides["token"] = ""
    return load_settings(config_file=ctx_params.get("config"), overrides=overrides)


FILE = click.Path(path_type=Path, dir_okay=False)
"""The click type of a file option: a path that must not be a directory."""


def _options(*options: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One decorator applying `options` in the order given (as stacked decorators would, top first)."""

    def apply(function: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            function = option(function)
        return function

    return apply


common_options = _options(
    click.option("--config", type=FILE, help="YAML config file."),
    click.option("--playbooks", type=click.Path(path_type=Path), help="Playbook directory [./playbooks]."),
    click.option("--database-url", help="SQLAlchemy URL of the store [sqlite:///remediate.db]."),
)

client_options = _options(
    common_options,
    click.option(
        "--server",
        metavar="URL",
        envvar="REMEDIATE_SERVER",
        help="Talk to a running server (e.g. http://127.0.0.1:9095) instead of the database.",
    ),
    click.option(
        "--token-file",
        type=FILE,
        help="File holding the bearer token (default: the operator token, $REMEDIATE_OPERATOR_TOKEN or "
        "$REMEDIATE_OPERATOR_TOKEN_FILE, else $REMEDIATE_TOKEN / $REMEDIATE_TOKEN_FILE, else the config file, else "
        "./remediate.operator-token or ./remediate.token as scripts/serve writes them); "
        "approve, pause, resume, breaker reset and ladder reset need an operator token.",
    ),
)
"""--config/--playbooks/--database-url and --server/--token-file: a command that reads the database or a server."""

gpu_options = _options(
    click.option(
        "--gpu-backend",
        type=click.Choice(["nvml", "simulated"]),
        help="GPU backend: nvml (the driver) or simulated (a device file; only ever chosen explicitly) [nvml].",
    ),
    click.option("--gpu-simulator-file", type=FILE, help="Device file of the simulated GPU backend (YAML/JSON)."),
)


def by_option(verb: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--by (or --as) of a command a person does (recorded with it): `verb` says what they do (resets, approves,
    ...). Default: the user running the command."""
    return click.option(
        "--by",
        "--as",
        "by",
        metavar="NAME",
        default=current_user,
        help=f"Who {verb} (recorded) [the user running this: $USER, else the login name].",
    )


def current_user() -> str:
    """Who runs the command: $USER, else $LOGNAME, else the password database's name of this uid (a container
    or cron sets no $USER: "cli" was recorded there, naming nobody), else `uid N`."""
    import getpass

    try:
        return os.environ.get("USER") or getpass.getuser()
    except (OSError, KeyError):  # a uid with no passwd entry (OpenShift's random uids)
        return f"uid {os.getuid()}"


def handle_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except RemediateError as exc:
            raise CliError(*_message_and_code(exc)) from exc
        except Exception as exc:
            message = _library_error(exc)
            if message is None:
                raise
            raise CliError(message) from exc

    return wrapper


def _message_and_code(exc: RemediateError) -> tuple[str, int]:
    """The line and exit code of one of remediate's errors: not found 3, refused 4, else 2."""
    status = getattr(exc, "status", None)  # remediate.cli._client.ServerError's, not imported: it imports requests
    if status == 401:
        return f"{exc}; {HINT_OF_401}", EXIT_REFUSED
    if isinstance(status, int):
        return str(exc), _EXIT_OF_STATUS.get(status, EXIT_ERROR)
    if isinstance(exc, UnknownRunError):
        return str(exc), EXIT_NOT_FOUND
    if isinstance(exc, RunStateError | AlreadyPaused | NotPaused):
        return str(exc), EXIT_REFUSED
    return str(exc), EXIT_ERROR


def _library_error(exc: Exception) -> str | None:
    """The one line for an error of requests or SQLAlchemy; None for any other exception.

    Looked up in sys.modules, not imported: a command that never loaded the library cannot have raised its
    errors, and `remediate agent` keeps its one process without the megabytes of either (its idle RSS
    target, docs/benchmarks.md)."""
    requests = sys.modules.get("requests")
    if requests is not None and isinstance(exc, requests.ConnectionError):
        return f"cannot reach the server: {exc}"
    if requests is not None and isinstance(exc, requests.RequestException):
        # A --server without http://, a timeout, ...: still one line, never a traceback.
        return f"request to the server failed: {exc}"
    sqlalchemy = sys.modules.get("sqlalchemy")
    if sqlalchemy is not None and isinstance(exc, sqlalchemy.exc.SQLAlchemyError):
        return f"database error: {getattr(exc, 'orig', exc)}"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc


def client_token(params: dict[str, Any]) -> str | None:
    """The bearer token a client command sends: --token-file when given; else the operator token
    (approve, pause, resume, breaker reset and ladder reset need it; it also reads), else the token — each resolved
    exactly as `serve` resolves its own (value, else file, from the environment or the config file) — else the
    file `scripts/serve` generated in the working directory (./remediate.operator-token, ./remediate.token)."""
    settings = _settings(params)
    if params.get("token_file"):
        return settings.auth.resolved("token")
    return settings.auth.resolved("operator_token") or settings.auth.resolved("token") or _token_of_scripts_serve()


def _token_of_scripts_serve() -> str | None:
    """The token `scripts/serve` generated in this working directory, when nothing else names one."""
    from remediate.config.values import token_from

    for name in TOKEN_FILES_OF_SCRIPTS_SERVE:
        if Path(name).is_file():
            return token_from(None, Path(name).absolute(), "token")
    return None


def _client(params: dict[str, Any]) -> Any:
    from remediate.cli._client import Client

    return Client(params["server"], client_token(params))


def _open_store(params: dict[str, Any]) -> Any:
    from remediate.rehearsal.dryrun import sqlite_path
    from remediate.store import Store

    url = _settings(params).store.url
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise CliError(f"no database at {path}: start the server first, or pass --database-url / --server")
    return Store.open(url)


def print_json(value: Any, as_json: bool) -> bool:
    """Print `value` as JSON when --json was given; whether it was (the command then prints nothing else).
    Its times are RFC 3339 UTC (`rfc3339_times`), as startsAt and the report's are, whatever the source."""
    if as_json:
        click.echo(json.dumps(rfc3339_times(value), indent=2, default=str))
    return as_json


def _is_time_key(key: str) -> bool:
    return key in ("time", "at") or key.endswith("_at")


def rfc3339_times(value: Any) -> Any:
    """`value` with every UNIX time (a number under a key `time`, `at` or `*_at`) as RFC 3339 UTC text.

    The HTTP API (v1) keeps its UNIX seconds (a change there is a change of the API); the CLI's --json is read
    by people and scripts that expect one format: before, `ladder status --json` mixed startsAt's RFC 3339 with
    `climbed_at` as UNIX seconds."""
    from remediate.intake.alerts import format_timestamp

    if isinstance(value, dict):
        return {
            key: format_timestamp(datetime.fromtimestamp(item, UTC))
            if _is_time_key(str(key)) and isinstance(item, int | float) and not isinstance(item, bool)
            else rfc3339_times(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [rfc3339_times(item) for item in value]
    return value


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


WAIT_POLL_SECONDS = 0.5


def wait_for_outcome(read: Callable[[], dict[str, Any]], run_id: int, timeout: float) -> dict[str, Any]:
    """Poll `read` (the run's JSON, from the database or a server) until the run is in a final status; exit 6
    (EXIT_WAIT_TIMED_OUT) when it is not within `timeout` seconds."""
    import time

    from remediate.runs import FINAL_RUN_STATUSES

    deadline = time.monotonic() + timeout
    while (detail := read())["status"] not in FINAL_RUN_STATUSES:
        left = deadline - time.monotonic()
        if left <= 0:
            raise CliError(
                f"run {run_id} is still {detail['status']} after {timeout:g}s: see `remediate show {run_id}`",
                EXIT_WAIT_TIMED_OUT,
            )
        time.sleep(min(WAIT_POLL_SECONDS, left))
    return detail


def print_outcome(detail: dict[str, Any]) -> None:
    """The outcome of a finished run, one line (and its failed step's error); exit 5 unless it succeeded."""
    from remediate.runs import RunStatus

    took = ""
    if detail.get("started_at") is not None and detail.get("finished_at") is not None:
        took = f" in {detail['finished_at'] - detail['started_at']:.1f}s"
    click.echo(f"run {detail['id']} {detail['status']}{took}" + (f": {detail['error']}" if detail.get("error") else ""))
    if detail["status"] not in (RunStatus.SUCCEEDED, RunStatus.PLANNED):
        raise SystemExit(EXIT_RUN_FAILED)
