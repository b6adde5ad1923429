"""The block of lines every start of `remediate serve` logs once: where it listens, its mode, GPU backend,
playbooks, store, cluster and token files (never a token)."""

from __future__ import annotations

import os
from pathlib import Path

from remediate.config.schedulers import Scheduler, describe
from remediate.config.settings import Settings

MODE_MEANING = {
    "enforce": "playbooks act on nodes, GPUs and the cluster",
    "dry-run": "shadow mode: every run only plans, nothing acts; --mode enforce or REMEDIATE_MODE=enforce to act",
}
NAMED_PLAYBOOKS = 12
"""Up to this many playbooks the block names them all; more: only how many."""


def _shown_file(path: Path | None) -> str:
    return str(path.resolve()) if path else "given in the environment or config (no file)"


def _cluster(settings: Settings) -> str:
    """Which cluster k8s.* steps act on, as remediate.kube.KubeClient chooses it."""
    kube = settings.kube
    if kube.kubeconfig is not None:
        return f"kubeconfig {kube.kubeconfig.resolve()}" + (f", context {kube.context}" if kube.context else "")
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "the in-cluster service account"
    return "none (set kubeconfig / REMEDIATE_KUBECONFIG to act on one; ~/.kube/config is never read on its own)"


def start_up_block(settings: Settings, playbook_names: list[str], uses_agents: bool) -> list[str]:
    """The lines every start prints once: where it listens, what it does, where its tokens are (never a token)."""
    from remediate.store.database import shown_url

    url = f"http://{settings.server.bind}"
    names = ", ".join(playbook_names) if len(playbook_names) <= NAMED_PLAYBOOKS else "..."
    lines = [
        f"remediate listening on {url}" + (f"; UI: {url}/ui/" if settings.ui.enabled else "; UI off"),
        f"mode: {settings.engine.mode} ({MODE_MEANING[settings.engine.mode]})",
        f"GPU backend: {settings.gpu.backend}"
        + (f" ({settings.gpu.simulator_file})" if settings.gpu.backend == "simulated" else ""),
        f"playbooks: {len(playbook_names)} from {settings.engine.playbooks} ({names})",
        # a URL may carry the database's password
        f"store: {shown_url(settings.store.url)}; node steps: "
        + ("on the agents of their nodes" if uses_agents else "here (no agents configured)"),
    ]
    schedulers = settings.engine.schedulers
    if Scheduler.KUBERNETES in schedulers:
        lines.append(f"cluster (k8s.* steps): {_cluster(settings)}")
    else:
        lines.append(f"cluster (k8s.* steps): left out of the playbooks (schedulers: {describe(schedulers)})")
    if Scheduler.SLURM in schedulers:
        partitions = ", ".join(settings.slurm.partitions) or "every partition"
        lines.append(f"Slurm (slurm.* steps): {settings.slurm.conf}; nodes of {partitions}")
    auth = settings.auth
    tokens = [
        f"{name}: {_shown_file(getattr(auth, f'{setting}_file'))}"
        for name, setting in (
            ("token", "token"),
            ("webhook", "webhook_token"),
            ("operator", "operator_token"),
            ("read", "read_token"),
        )
        if getattr(auth, f"{setting}_file") or getattr(auth, setting)
    ]
    if auth.tokens_file:
        tokens.append(f"named tokens: {_shown_file(auth.tokens_file)}")
    lines.append("token files: " + ("; ".join(tokens) if tokens else "none (--insecure-no-auth)"))
    return lines
