"""All the checks, in order: tokens, burn-in settings, series, routing, sinks, cluster. What they need comes in
explicitly (the settings, the loaded playbooks, the rule files, the HTTP probe), so the CLI and GET /doctor run
the same."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from remediate.config.settings import Settings
from remediate.doctor import burnin, cluster, routing, series, sinks, tokens
from remediate.doctor.model import Check, fail, warn
from remediate.doctor.probe import Probe, ProbeError, bearer
from remediate.doctor.rules import Rule, read_rules, rule_files
from remediate.errors import ConfigError
from remediate.kube.client import KubeClient
from remediate.playbooks.model import Playbook
from remediate.slurm.client import SlurmClient


@dataclass
class Inputs:
    settings: Settings
    playbooks: tuple[Playbook, ...]
    rules: Path | None = None
    """A rule file or a directory of them (the rule_files setting, or --rules)."""
    probe: Probe = field(default_factory=Probe)


def this_server(settings: Settings) -> Callable[[str], bool]:
    return functools.partial(points_here, settings=settings)


def points_here(url: str, settings: Settings) -> bool:
    """Whether an AlertManager webhook `url` is this server's /webhook: its path, and the host:port of
    public_url, or the port this server binds (a Service in front of it keeps the port: the chart's does)."""
    parts = urlsplit(url)
    if not parts.path.rstrip("/").endswith("/webhook"):
        return False
    if settings.notify.public_url and urlsplit(settings.notify.public_url).netloc == parts.netloc:
        return True
    bind_port = settings.server.bind.rpartition(":")[2]
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return str(port) == bind_port


def prometheus_queries(playbooks: Iterable[Playbook]) -> list[tuple[str, str]]:
    """(name, query) of every check.prometheus step of the playbooks."""
    return [
        (f"playbook {playbook.name} step {step.name}", str(step.params["query"]))
        for playbook in playbooks
        for step in playbook.every_step()
        if step.action == "check.prometheus" and isinstance(step.params.get("query"), str)
    ]


def run_checks(inputs: Inputs) -> list[Check]:
    settings, playbooks = inputs.settings, inputs.playbooks
    rules, rule_checks = _rules(inputs.rules)
    checks = tokens.check_tokens(settings) + burnin.check_burnin(settings) + rule_checks + _series(inputs, rules)
    checks += routing.check_routing(
        inputs.probe, settings.prometheus.alertmanager_url, playbooks, rules, this_server(settings)
    )
    steps = [step for playbook in playbooks for step in playbook.every_step()]
    used_sinks = [
        str(s.params["sink"]) for s in steps if s.action == "notify" and isinstance(s.params.get("sink"), str)
    ]
    checks += sinks.check_sinks(inputs.probe, settings.notify.sinks, used_sinks)
    return checks + _cluster(settings, [step.action for step in steps])


def _rules(where: Path | None) -> tuple[list[Rule], list[Check]]:
    if where is None:
        unset = warn(
            series.FAMILY,
            "series: rule files",
            "rule_files is not set: only the playbooks' check.prometheus queries are checked, not the alerting rules",
            "set rule_files (or --rules) to the rule files Prometheus loads, e.g. alertmanager/rules",
        )
        return [], [unset]
    try:
        return read_rules(rule_files(where)), []
    except ConfigError as exc:
        return [], [fail(series.FAMILY, "series: rule files", str(exc), "fix the rule file (promtool check rules)")]


def _cluster(settings: Settings, actions: list[str]) -> list[Check]:
    kube = KubeClient(
        kubeconfig=settings.kube.kubeconfig,
        context=settings.kube.context,
        request_timeout=settings.kube.request_timeout,
    )
    try:
        checks = cluster.check_kube(kube, actions)
    finally:
        kube.close()
    slurm = SlurmClient(
        conf=settings.slurm.conf, bin_dir=settings.slurm.bin_dir, timeout=settings.slurm.command_timeout
    )
    return checks + cluster.check_slurm(slurm, actions)


def _series(inputs: Inputs, rules: list[Rule]) -> list[Check]:
    prometheus = inputs.settings.prometheus
    queries = prometheus_queries(inputs.playbooks)
    expressions = series.expressions(rules, queries)
    if not expressions:
        return []
    why = "prometheus_url is not set: the series the rules read were not checked"
    if prometheus.url is None:
        return series.check_series(None, expressions, needed=bool(queries), why_none=why)
    try:
        headers = bearer(prometheus.bearer_token_file)
    except ProbeError as exc:
        return series.check_series(None, expressions, needed=True, why_none=str(exc))
    probe = Probe(timeout=inputs.probe.timeout, headers=headers)
    return series.check_series(series.SeriesStates(probe, prometheus.url), expressions, needed=True, why_none="")


def load_playbooks(settings: Settings) -> tuple[tuple[Playbook, ...], list[Check]]:
    """The playbooks of the playbook directory as `serve` would load them, and a failed check per invalid one
    (the CLI's: a running server's are those it holds)."""
    from remediate.actions import default_registry
    from remediate.playbooks.loading import load_directory

    loaded, errors = load_directory(settings.engine.playbooks, default_registry(settings))
    checks = [
        fail("playbooks", "playbooks", str(error), "remediate playbooks validate shows each problem")
        for error in errors
    ]
    return tuple(loaded), checks
