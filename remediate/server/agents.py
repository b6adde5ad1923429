"""POST /v1/agent-credential: an agent pod's own node credential, for the pod's projected ServiceAccount
token (remediate.kube.enroll). Authenticated by that token alone, so none of the server's bearer tokens
is needed (nor accepted); 404 when this server finds no agents through Kubernetes.

Anyone who reaches the port may ask, and each question costs the API server a TokenReview (and reads of a pod
and a DaemonSet): a refused token is answered from memory for REFUSAL_TTL seconds, and each client address
may make TokenReviews at the rate of ADDRESS_BUCKET (429 with Retry-After above it). All addresses together may
make `agent_enroll_rate` in any second, each check counted from its start to its end (server_limit): when a
DaemonSet rollout starts 10,000 agent pods at once, the API server sees that rate and no more, and the agents
back off with jitter on the 429 (remediate.cli.agent)."""

from __future__ import annotations

import logging
import math
from typing import Any

from flask import Blueprint, jsonify, request

from remediate.agentwire.protocol import CREDENTIAL_PATH
from remediate.kube.enroll import EnrollmentBroken, EnrollmentRefused
from remediate.kube.errors import KubeError, KubeUnavailable
from remediate.server.answers import error
from remediate.server.ratelimit import RecentRefusals, TokenBuckets, WindowLimit
from remediate.services import Services

log = logging.getLogger("remediate.server")

MAX_AGENT_TOKEN_BYTES = 16 * 1024
"""A projected ServiceAccount token (a JWT) is 1-2 KiB; anything far larger is not sent to the API server."""
REFUSAL_TTL = 60.0
"""Seconds a refused token's answer is remembered. What refuses a token (wrong audience, expired, its pod gone,
replaced, terminating or no agent) does not change for that token, and an agent does not ask again after a
401/403: the memory only costs a sender of the same bad token. Transient failures (503) are never remembered."""
ADDRESS_BUCKET = (10, 1 / 3)
"""(burst, TokenReviews per second) per client address and HTTP worker. An agent pod asks once per start, and
while the server cannot answer (503, 429) a few times a minute (Retry-After, then full jitter up to 60 s);
each pod has an address of its own. A flood from one address costs the API one TokenReview per 3 s after 10."""
MAX_REMEMBERED = 4096
"""Addresses and refused tokens each remembered at most (the least recently used dropped first; a few hundred
bytes each)."""


def server_limit(enroll_rate: int, workers: int) -> WindowLimit:
    """This HTTP worker's share of the server's TokenReview rate: `enroll_rate` // `workers` (at least 1) in any
    second. Each worker holds its own (remediate.server.ratelimit), so the shares add up to `enroll_rate` at most
    (with workers > enroll_rate: one each); a worker at its share answers 429 while another may have room: the
    agent asks again after Retry-After."""
    return WindowLimit(limit=max(1, enroll_rate // max(1, workers)), window=1.0)


def _too_many(wait: float, message: str) -> Any:
    response, status = error(429, "too_many_requests", message)
    response.headers["Retry-After"] = str(max(1, math.ceil(wait)))
    return response, status


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("agents", __name__)
    refusals: RecentRefusals[EnrollmentRefused] = RecentRefusals(ttl=REFUSAL_TTL, max_entries=MAX_REMEMBERED)
    burst, rate = ADDRESS_BUCKET
    buckets = TokenBuckets(capacity=burst, per_second=rate, max_keys=MAX_REMEMBERED)
    everyone = server_limit(services.settings.agent.enroll_rate, services.settings.server.workers)

    def refused(exc: EnrollmentRefused) -> Any:
        return error(exc.status, "unauthorized" if exc.status == 401 else "forbidden", str(exc))

    @bp.post(CREDENTIAL_PATH)
    def agent_credential() -> Any:
        enrollment = services.agent_enrollment
        if enrollment is None:
            return error(
                404,
                "not_found",
                "this server hands out no agent credentials: it finds no agents through Kubernetes "
                "(agent_selector) or has no agent_token",
            )
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > MAX_AGENT_TOKEN_BYTES:
            response, status = error(
                401,
                "unauthorized",
                "send the agent pod's projected ServiceAccount token: Authorization: Bearer <token>",
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="remediate-agent-credential"'
            return response, status
        known = refusals.get(token)
        if known is not None:
            return refused(known)
        wait = buckets.take(request.remote_addr or "")
        if wait:
            log.warning("too many agent credential requests from %s: %.0fs until the next", request.remote_addr, wait)
            return _too_many(wait, f"too many agent credential requests from {request.remote_addr}")
        # After the address's own bucket: a flood from one address takes at most its burst of everyone's share,
        # then one review per 3 s.
        wait = everyone.take()
        if wait:
            # Not logged: in a rollout most agents hear this once or twice, as designed.
            return _too_many(wait, "the server is checking as many agent tokens per second as it may: ask again")
        try:
            pod, credential = enrollment.issue(token)
        except EnrollmentRefused as exc:
            refusals.put(token, exc)
            log.warning("refused an agent credential to %s: %s", request.remote_addr, exc)
            return refused(exc)
        except EnrollmentBroken as exc:
            # The server's set-up, not the pod: say so where the operator looks, and let the agent stop asking.
            log.error("cannot hand out agent credentials (asked by %s): %s", request.remote_addr, exc)
            return error(500, "enrollment_broken", str(exc))
        except (KubeError, KubeUnavailable) as exc:
            log.warning("cannot check the agent token of %s: %s", request.remote_addr, exc)
            return error(503, "kube_unavailable", f"cannot ask the Kubernetes API whose token this is: {exc}")
        finally:
            everyone.done()
        log.info(
            "gave the agent credential of node %s to pod %s/%s (%s)",
            pod.node,
            pod.namespace,
            pod.pod,
            request.remote_addr,
        )
        return jsonify({"node": pod.node, "credential": credential})

    return bp
