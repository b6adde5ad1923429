"""`k8s.cordon`, `k8s.uncordon`, `k8s.taint`, `k8s.untaint`, `k8s.drain`: take a node out of service, and back;
`k8s.handoff`: hand it to a breakfix system, which owns it from then on.

The node comes from the step's `node` param or, by default, from the alert's labels in
the configured order (kube_node_labels: node, kubernetes_node, Hostname, hostname,
instance without its port); it must be a DNS-1123 name and exist, or the step fails
before anything changes.

Safety, in order of importance:

- Cordon, taint and drain claim the node from the circuit breaker first
  (`StepContext.breaker`, remediate.breaker): past the cap the step fails with
  `breaker open: ...` and nothing changes. Uncordon and untaint are never refused.
- Remediate only undoes its own changes. What it did is written on the node, in
  remediate.io/ annotations, by the same write that makes the change (see
  remediate.kube.model). A node someone else cordoned or tainted is left alone, and
  the result says so.
- One owner per node: while the remediate.io/owner annotation names another system (`k8s.handoff`,
  remediate.kube.owner), cordon, taint and drain refuse naming it (their plans say can_act false); uncordon
  and untaint, the undo of remediate's own changes, are never refused.
- Writes are conditional on the resourceVersion just read (a 409 means someone else
  wrote in between: re-read and decide again), so taints of others are never lost
  even though a strategic-merge patch replaces the whole `spec.taints` list.
- No change is made twice: every decision starts from a fresh read (a retry after a
  lost answer finds the change already there), events have names derived from the run
  and step (a second create is a 409, i.e. done), and evicting a pod that is already
  terminating changes nothing. All five actions are therefore idempotent.
- Transient API errors (5xx, timeouts, resets, throttling) are retried a few times per
  call with tenacity; if they persist the step fails retryable and the executor
  retries the whole step. Other 4xx fail at once with the API's message.

Every change gets an events.k8s.io/v1 Event on the node (`kubectl describe node`
shows it): timezone-aware eventTime, regarding the node with its uid.

Modules: `common` (options, params, API calls, breaker, events), `patching` (the one
read → decide → conditional patch → retry-on-409 → event loop), one module per family:
`cordon`, `taint`, `drain`, `handoff`.
"""

from __future__ import annotations

from remediate.actions.k8s.common import KubeAction, KubeOptions
from remediate.actions.k8s.cordon import CordonAction, UncordonAction
from remediate.actions.k8s.drain import DrainAction
from remediate.actions.k8s.handoff import HandoffAction
from remediate.actions.k8s.taint import TaintAction, UntaintAction

__all__ = [
    "CordonAction",
    "DrainAction",
    "HandoffAction",
    "KubeAction",
    "KubeOptions",
    "TaintAction",
    "UncordonAction",
    "UntaintAction",
]
