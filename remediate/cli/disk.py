"""`remediate disk policies` and `remediate disk plan`: this node's cleanup policies and what a cleanup
would delete."""

from __future__ import annotations

from typing import Any

import click

from remediate.cli._common import (
    FILE,
    _options,
    _settings,
    _table,
    handle_errors,
    print_json,
)
from remediate.cli._group import main

_disk_options = _options(
    click.option("--config", type=FILE, help="YAML config file."),
    click.option(
        "--policies-file",
        "cleanup_policies_file",
        type=FILE,
        help="Cleanup policies file [$REMEDIATE_CLEANUP_POLICIES_FILE / cleanup_policies_file].",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print JSON."),
)


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
    policies = PolicySource(settings.disk.cleanup_policies_file)()
    rows = [p.to_dict() for p in policies]
    if print_json(rows, as_json):
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
    from remediate.intake.alertref import AlertRef

    settings = _settings(params, cleanup_policies_file=params["cleanup_policies_file"])
    action = default_registry(settings).get("disk.cleanup")
    step = {k: params[k] for k in ("policy", "mountpoint", "free_percent", "free_bytes", "max_files", "max_bytes")}
    checked = action.validate({k: v for k, v in step.items() if v is not None})
    ctx = StepContext(run_id=0, step_index=0, playbook="(cli)", target="(local)", alert=AlertRef())
    plan = action.plan(checked, ctx)
    if print_json(plan, as_json):
        return
    for entry in plan["would_delete"]:
        click.echo(f"delete    {entry['modified']}  {entry['size']:>14}  {entry['path']}")
    for entry in plan["would_truncate"]:
        click.echo(f"truncate  {entry['size']:>14} -> {entry['keep_bytes']}  {entry['path']}")
    for note in plan["notes"]:
        click.echo(f"note: {note}")
    click.echo(plan["summary"])
