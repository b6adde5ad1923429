"""The process title of each role, as `ps` and `top` show it: `remediate: master`, `remediate: http`,
`remediate: executor`, `remediate: agent` (instead of `python -B -P -c import sys; ...` for all of them).

setproctitle (a dependency) rewrites the title; where it cannot be imported the titles stay as they are.
"""

from __future__ import annotations

from typing import Any

PREFIX = "remediate: "

_GUNICORN_ROLES = {"master": "master", "worker": "http"}
"""gunicorn's own titles (`master [proc_name]`, `worker [proc_name]`) and the role each is here."""


def set_title(role: str) -> None:
    """Title this process `remediate: ROLE`."""
    try:
        from setproctitle import setproctitle
    except ImportError:  # a checkout without the dependency installed: only ps is poorer for it
        return
    setproctitle(PREFIX + role)


def _gunicorn_title(title: str) -> None:
    set_title(_GUNICORN_ROLES.get(title.split(" ", 1)[0], title))


def take_over_gunicorn_titles(util: Any) -> None:
    """Make gunicorn's `util._setproctitle` (called by its master on start and reload, and by each worker it
    forks) set our titles: `remediate: master`, `remediate: http`, not `gunicorn: master [remediate]`."""
    if getattr(util, "_setproctitle", None) is not None:
        util._setproctitle = _gunicorn_title
