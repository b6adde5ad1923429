"""The database commands: `remediate db copy` (a history from one database into an empty one)."""

from __future__ import annotations

import click

from remediate.cli._common import handle_errors
from remediate.cli._group import main


@main.group()
def db() -> None:
    """Database maintenance (copy a history from SQLite to PostgreSQL, or back)."""


@db.command("copy")
@click.option(
    "--from",
    "source",
    required=True,
    metavar="URL",
    help="Database to copy from; only read (e.g. sqlite:////var/lib/remediate/remediate.db).",
)
@click.option(
    "--to",
    "target",
    required=True,
    metavar="URL",
    help="Empty database to copy into (e.g. postgresql+psycopg://user:pass@host/db; postgresql:// works too).",
)
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True, help="Rows per batch.")
@click.option("--dry-run", is_flag=True, help="Check both databases and count the rows; write nothing.")
@handle_errors
def copy(source: str, target: str, batch_size: int, dry_run: bool) -> None:
    """Copy every table of one remediate database into an empty one, keeping ids.

    Stop the server first. The source must have this remediate's schema version and is never written;
    the target is written in one transaction, so a copy that fails leaves it as it was: run it again.
    Progress goes to stderr, the summary to stdout.
    """
    from remediate.config.values import to_database_url
    from remediate.store.copy import TableCopy, copy_database

    def progress(table: TableCopy) -> None:
        click.echo(f"{table.table}: {table.rows} rows{' to copy' if dry_run else ' copied'}", err=True)

    report = copy_database(
        to_database_url(source),
        to_database_url(target),
        batch_size=batch_size,
        dry_run=dry_run,
        progress=progress,
    )
    verb = "would copy" if report.dry_run else "copied"
    click.echo(f"{verb} {report.rows} rows in {len(report.tables)} tables from {report.source} to {report.target}")
