"""The `remediate` command. Thin click commands; heavy imports happen inside them.

Every command takes --config / --playbooks / --database-url (and the client
commands --server URL to talk to a running server instead of the database).
Errors are one line on stderr, never a traceback; exit codes 2 usage or error, 3 not found, 4 refused
(remediate/cli/_common.py, docs/cli.md).

One module per command group (`remediate --help` names them all); `_group` holds the click group `main` (the
console script `remediate = "remediate.cli:main"`), `_common` what the commands share and `_client` the HTTP client
of --server mode (imported by a command that uses it: it loads requests). Importing this package
imports every command module of it (not the `_` ones), and each registers its commands on `main`: no list to keep.

May import: anything below it (store, judging, rehearsal, history, the backends) inside its commands; nothing
imports it but the console script and `python -m remediate`.
"""

from __future__ import annotations

import importlib
import pkgutil

from remediate.cli._group import main

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):  # _group, _common, _client: what the command modules share
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["main"]
