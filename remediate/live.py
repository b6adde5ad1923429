"""What a reload of `remediate serve` re-reads (SIGHUP to its master, POST /-/reload): the live set.

The rest of the settings (bind, store, tokens, mode) is read once at start; changing it needs a restart.
A reload reads the whole set or nothing: one invalid file and the server keeps the set it runs. The new
set applies to alerts received after the reload; runs already stored keep the steps they were stored with
(the executor runs a run's stored steps and never reads its playbook again).
"""

from __future__ import annotations

from dataclasses import dataclass

from remediate.actions import default_registry
from remediate.config import Settings
from remediate.playbooks import PlaybookSet, load_playbooks


@dataclass(frozen=True)
class LiveSet:
    """The part of the configuration a reload replaces."""

    playbooks: PlaybookSet

    @property
    def names(self) -> list[str]:
        return [playbook.name for playbook in self.playbooks.playbooks]

    def describe(self) -> str:
        """`3 playbooks (a, b, c)`, as the log and the reload's answer say it."""
        return f"{len(self.playbooks)} playbooks ({', '.join(self.names)})"


def read_live(settings: Settings) -> LiveSet:
    """The live set as its files are now; a PlaybookError names each invalid file and why (the caller then
    keeps the set it runs). What else a reload should re-read (the settings file's sinks) joins here."""
    return LiveSet(load_playbooks(settings.engine.playbooks, default_registry(settings)))
