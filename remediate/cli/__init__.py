"""The `remediate` command. Thin click commands; heavy imports happen inside them.

Every command takes --config / --playbooks / --database-url (and the client
commands --server URL to talk to a running server instead of the database).
Errors are one line on stderr and exit code 2; never a traceback.

The package holds one module per command group:

- `_group`: the click group `main` (the console script `remediate = "remediate.cli:main"`);
- `_common`: exit codes, CliError, handle_errors, the shared option decorators, settings, store/client, tables;
- `serve`, `agent`: the server and the node agent;
- `playbooks`, `dryrun`, `actions`: playbooks list/validate, dry-run, the action reference;
- `history`: history (and history prune), show, approve, pause, resume; ladder and breaker status/reset;
- `report`: the reliability figures of a window (incidents, remediations by rung, MTTR, held nodes);
- `gpu`, `disk`: gpu status, disk policies/plan;
- `db`: db copy (a history from one database into an empty one).

Importing this package imports the group, then every command module, which registers its commands on it.
"""

from __future__ import annotations

# The command modules register their commands on `main` when imported (they import it from _group).
from remediate.cli import (
    actions,
    agent,
    db,
    disk,
    dryrun,
    gpu,
    history,
    playbooks,
    report,
    serve,
)
from remediate.cli._group import main

__all__ = [
    "actions",
    "agent",
    "db",
    "disk",
    "dryrun",
    "gpu",
    "history",
    "main",
    "playbooks",
    "report",
    "serve",
]
