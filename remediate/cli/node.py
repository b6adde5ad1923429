"""`remediate node release NODE`: give a node a breakfix system owns (k8s.handoff) back to remediate.

The owner normally releases the node itself by removing the remediate.io/owner annotation; this is the
operator's way to do it. It talks to the cluster of the settings (kubeconfig / in-cluster), never to the
server, and is audited (`node_released`, docs/logging.md).
"""

from __future__ import annotations

import logging
from typing import Any

import click

from remediate.cli._common import (
    EXIT_NOT_FOUND,
    CliError,
    _settings,
    by_option,
    common_options,
    handle_errors,
)
from remediate.cli._group import main


@main.group()
def node() -> None:
    """Nodes handed to another system (k8s.handoff): release."""


@node.command("release")
@click.argument("name")
@common_options
@click.option("--reason", default="", help="Why (recorded).")
@by_option("releases")
@handle_errors
def node_release(name: str, reason: str, by: str, **params: Any) -> None:
    """Remove the remediate.io/owner annotation of node NAME: remediate may change the node again.

    A node no other system owns is left as it is (exit 0, nothing recorded)."""
    from remediate.kube import KubeClient, KubeNotFound, check_node_name, owner_of, release_patch
    from remediate.logs.audit import audit_event
    from remediate.logs.setup import configure_logging

    problem = check_node_name(name)
    if problem:
        raise click.BadParameter(f"node name {problem}", param_hint="NAME")
    settings = _settings(params)
    configure_logging(settings.log.format, settings.log.level)
    kube = settings.kube
    client = KubeClient(kubeconfig=kube.kubeconfig, context=kube.context, request_timeout=kube.request_timeout)
    try:
        try:
            current = owner_of(client.get_node(name).annotations)
        except KubeNotFound as exc:
            raise CliError(f"node {name} does not exist in the cluster", EXIT_NOT_FOUND) from exc
        if current is None:
            click.echo(f"{name} is not owned by another system: nothing to release")
            return
        client.patch_node(name, release_patch())
    finally:
        client.close()
    # WARNING, as resets are: remediate may change a node again that a person or a system had taken from it.
    audit_event(
        "node_released", level=logging.WARNING, node=name, owner=current.name, owner_since=current.since,
        principal=by, reason=reason,
    )  # fmt: skip
    click.echo(f"released {current.describe(name)}; remediate may change it again")
