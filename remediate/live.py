"""What a reload of `remediate serve` re-reads (SIGHUP to its master, POST /-/reload): the live set.

The playbooks directory and the named sinks (the settings file's `sinks`, or $REMEDIATE_SINKS). The rest of the
settings (bind, store, tokens, mode) is read once at start; changing it needs a restart. A reload reads the
whole set or nothing: one invalid file and the server keeps the set it runs. The new set applies to alerts
received after the reload; runs already stored keep the steps they were stored with (the executor runs a run's
stored steps and never reads its playbook again), and their notify steps post to the sinks as they are then.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry
from remediate.actions.notify_sink import NotifyAction, unconfigured_sinks
from remediate.config.settings import Settings, read_config_file, settings_from_env
from remediate.config.values import ENV_PREFIX, Sink
from remediate.errors import ConfigError, PlaybookError
from remediate.playbooks.loading import load_playbooks
from remediate.playbooks.model import PlaybookSet

RELOAD_ERRORS = (PlaybookError, ConfigError)
"""What `read_live` raises for an invalid file: the reload is refused, naming the file and why."""


@dataclass(frozen=True)
class LiveSet:
    """The part of the configuration a reload replaces."""

    playbooks: PlaybookSet
    sinks: tuple[Sink, ...] = ()

    @property
    def names(self) -> list[str]:
        return [playbook.name for playbook in self.playbooks.playbooks]

    def describe(self) -> str:
        """`3 playbooks (a, b, c), sinks: oncall`, as the log and the reload's answer say it."""
        sinks = ", ".join(sink.name for sink in self.sinks) or "none"
        return f"{len(self.playbooks)} playbooks ({', '.join(self.names)}), sinks: {sinks}"

    def unconfigured(self) -> str | None:
        """The warning naming the sinks the playbooks notify that are not configured; None: none."""
        return unconfigured_sinks(self.playbooks.playbooks, self.sinks)

    def over(self, settings: Settings) -> Settings:
        """`settings` with this set's sinks: what a process forked after the reload builds its actions from."""
        return dataclasses.replace(settings, notify=dataclasses.replace(settings.notify, sinks=self.sinks))

    def apply_to(self, registry: ActionRegistry) -> None:
        """A running process's actions take this set's sinks (its engine takes the playbooks)."""
        if NotifyAction.name in registry:
            notify = registry.get(NotifyAction.name)
            assert isinstance(notify, NotifyAction)
            notify.use_sinks(self.sinks)


def current_sinks(settings: Settings, env: Mapping[str, str] | None = None) -> tuple[Sink, ...]:
    """The `sinks` setting as its sources say now: $REMEDIATE_SINKS, else the settings file's, else none (no
    command-line flag sets sinks). ConfigError names what is wrong."""
    env = os.environ if env is None else env
    values = read_config_file(settings.server.config_file) if settings.server.config_file else {}
    values.update(settings_from_env({key: env[key] for key in (f"{ENV_PREFIX}SINKS",) if key in env}))
    sinks: tuple[Sink, ...] = values.get("sinks", ())
    return sinks


def read_live(settings: Settings) -> LiveSet:
    """The live set as its files are now; a PlaybookError or ConfigError (RELOAD_ERRORS) names each invalid
    file and why (the caller then keeps the set it runs)."""
    return LiveSet(load_playbooks(settings.engine.playbooks, default_registry(settings)), current_sinks(settings))
