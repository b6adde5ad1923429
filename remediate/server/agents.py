"""POST /v1/agent-credential: an agent pod's own node credential, for the pod's projected ServiceAccount
token (remediate.kube.enroll). Authenticated by that token alone, so none of the server's bearer tokens
is needed (nor accepted); 404 when this server finds no agents through Kubernetes."""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, jsonify, request

from remediate.agent_protocol import CREDENTIAL_PATH
from remediate.kube.enroll import EnrollmentRefused
from remediate.kube.errors import KubeError, KubeUnavailable
from remediate.server.answers import error
from remediate.services import Services

log = logging.getLogger("remediate.server")

MAX_AGENT_TOKEN_BYTES = 16 * 1024
"""A projected ServiceAccount token (a JWT) is 1-2 KiB; anything far larger is not sent to the API server."""


def create_blueprint(services: Services) -> Blueprint:
    bp = Blueprint("agents", __name__)

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
        try:
            pod, credential = enrollment.issue(token)
        except EnrollmentRefused as exc:
            log.warning("refused an agent credential to %s: %s", request.remote_addr, exc)
            return error(exc.status, "unauthorized" if exc.status == 401 else "forbidden", str(exc))
        except (KubeError, KubeUnavailable) as exc:
            log.warning("cannot check the agent token of %s: %s", request.remote_addr, exc)
            return error(503, "kube_unavailable", f"cannot ask the Kubernetes API whose token this is: {exc}")
        log.info(
            "gave the agent credential of node %s to pod %s/%s (%s)",
            pod.node,
            pod.namespace,
            pod.pod,
            request.remote_addr,
        )
        return jsonify({"node": pod.node, "credential": credential})

    return bp
