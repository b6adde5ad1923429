"""`remediate serve`: the server (webhook receiver, executor, history API) under gunicorn."""

from __future__ import annotations

from typing import Any

import click

from remediate.cli._common import (
    FILE,
    _settings,
    common_options,
    gpu_options,
    handle_errors,
)
from remediate.cli._group import main


@main.command()
@common_options
@gpu_options
@click.option("--bind", help="host:port to listen on [127.0.0.1:9095].")
@click.option("--workers", type=click.IntRange(1, 64), help="gunicorn HTTP worker processes [2].")
@click.option("--threads", type=click.IntRange(1, 64), help="Requests each worker answers at once [4].")
@click.option("--executor-threads", type=click.IntRange(0, 64), help="Threads of the executor process (0: none) [4].")
@click.option("--mode", type=click.Choice(["enforce", "dry-run"]), help="dry-run = shadow mode: only plan.")
@click.option(
    "--token-file",
    type=FILE,
    help="File holding the token (or $REMEDIATE_TOKEN): webhook-only unless token_roles says more; "
    "operators use REMEDIATE_OPERATOR_TOKEN(_FILE).",
)
@click.option(
    "--insecure-no-auth", is_flag=True, default=None, help="Serve without a token. Only for local experiments."
)
@click.option("--ui/--no-ui", default=None, help="Serve the web pages under /ui/ [on].")
@handle_errors
def serve(**params: Any) -> None:
    """Run the server under gunicorn: webhook receiver and history API (HTTP workers), executor (its own process).

    SIGHUP to this process (or POST /-/reload) re-reads the playbooks without a restart; an invalid file
    keeps the running set."""
    settings = _settings(
        params,
        bind=params["bind"],
        workers=params["workers"],
        threads=params["threads"],
        executor_threads=params["executor_threads"],
        mode=params["mode"],
        insecure_no_auth=params["insecure_no_auth"],
        ui=params["ui"],
    )
    from remediate.serve.launcher import run_server

    run_server(settings)
