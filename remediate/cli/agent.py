"""`remediate agent`: the node agent that plans and executes node-local steps."""

from __future__ import annotations

import email.utils
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from remediate.cli._common import (
    FILE,
    _settings,
    gpu_options,
    handle_errors,
)
from remediate.cli._group import main
from remediate.errors import ConfigError


@main.command()
@click.option("--config", type=FILE, help="YAML config file.")
@gpu_options
@click.option("--bind", "agent_bind", help="host:port to listen on [127.0.0.1:9096].")
@click.option(
    "--token-file",
    "agent_token_file",
    type=FILE,
    help="File holding the master agent token (or set $REMEDIATE_AGENT_TOKEN); prefer --node-token-file.",
)
@click.option(
    "--node-token-file",
    "agent_node_token_file",
    type=FILE,
    help="File holding this node's own credential (`remediate agent-credential NODE`; or $REMEDIATE_AGENT_NODE_TOKEN).",
)
@click.option("--node-name", help="This node's name: the only target it runs steps for [the host name].")
@click.option(
    "--state-file",
    "agent_state_file",
    type=FILE,
    help="SQLite file of what node actions remember [./remediate-agent.db].",
)
@click.option(
    "--policies-file", "cleanup_policies_file", type=FILE, help="This node's cleanup policies file (disk.cleanup)."
)
@click.option("--power-floor-watts", "gpu_power_floor_watts", type=float, help="Refuse GPU power limits below this.")
@click.option("--threads", "agent_threads", type=click.IntRange(1, 256), help="Steps it runs at once [8].")
@click.option(
    "--insecure-no-auth", is_flag=True, default=None, help="Serve without a token. Only for local experiments."
)
@handle_errors
def agent(**params: Any) -> None:
    """Run the node agent: plans and executes node-local steps (gpu.*, disk.*, training.*) sent by the
    server for this node, within this node's own limits."""
    settings = _settings(params, **{key: value for key, value in params.items() if key != "config"})
    from remediate.agent.server import serve_agent
    from remediate.serve.proctitle import set_title

    set_title("agent")
    serve_agent(settings)


@main.command("agent-credential")
@click.argument("node")
@click.option("--config", type=FILE, help="YAML config file.")
@click.option(
    "--token-file",
    "agent_token_file",
    type=FILE,
    help="File holding the master agent token the server has (or set $REMEDIATE_AGENT_TOKEN).",
)
@click.option(
    "--server",
    "server_url",
    help="Ask this remediate server instead (Kubernetes: POST /v1/agent-credential with this pod's own "
    "projected ServiceAccount token); no master token needed.",
)
@click.option(
    "--service-account-token-file",
    type=FILE,
    default=Path("/var/run/secrets/remediate/token"),
    show_default=True,
    help="With --server: the pod's projected ServiceAccount token (audience: the server's agent_audience).",
)
@click.option(
    "--wait",
    type=click.FloatRange(0, 3600),
    default=1200.0,
    show_default=True,
    help="With --server: seconds to keep trying while the server cannot be reached, is not ready or asks to "
    "wait (a rollout of 10,000 agents takes ~10 minutes at the server's agent_enroll_rate of 20/s).",
)
@click.option(
    "--ca-file",
    type=FILE,
    help="With an https:// --server: verify its certificate with this CA file (PEM) instead of the system's.",
)
@click.option("--output", type=FILE, help="Write the credential to this file (mode 0600) instead of printing it.")
@handle_errors
def agent_credential(
    node: str,
    output: Path | None,
    server_url: str | None,
    service_account_token_file: Path,
    wait: float,
    ca_file: Path | None,
    **params: Any,
) -> None:
    """Print NODE's own agent credential: derived from the master agent token, or, with --server, asked of the
    server, which gives an agent pod the credential of the node it runs on and no other. Give it to that node's
    agent only (agent_node_token_file); it signs nothing for any other node."""
    from remediate.agentwire.auth import node_token

    if server_url:
        credential = credential_from_server(server_url, service_account_token_file, node, wait, ca_file=ca_file)
    else:
        settings = _settings(params, agent_token_file=params["agent_token_file"])
        master = settings.agent.resolved_token()
        if not master:
            raise ConfigError("no master agent token: set REMEDIATE_AGENT_TOKEN or --token-file (or ask --server)")
        credential = node_token(master, node)
    if output is None:
        click.echo(credential)
        return
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(credential + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc.strerror}") from exc
    click.echo(f"wrote the agent credential of node {node} to {output}")


RETRY_STATUSES = (429, 502, 503, 504)
"""Answers of a server that is starting, restarting, cannot reach the Kubernetes API or was asked too often:
asked again. Any other (a refusal, or a 500: the server cannot check tokens until its set-up is fixed) ends it."""


@dataclass
class Backoff:
    """The pause before an agent asks the server again: the Retry-After it was given (if any), then a random
    share of an exponential window, `base` x 2^attempt up to `cap` seconds ("full jitter"). When a DaemonSet
    rollout starts thousands of agent pods at once and the server answers most a 429, no two come back together:
    each pod draws from its own generator (seeded from os.urandom), so they spread over the whole window instead
    of returning in waves at 1, 2, 4 s."""

    base: float = 1.0
    cap: float = 60.0
    rng: random.Random = field(default_factory=random.Random)

    def pause(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after the `attempt`-th failed request (0 for the first)."""
        window = min(self.cap, self.base * 2.0 ** min(attempt, 32))
        return (retry_after or 0.0) + self.rng.uniform(0.0, window)


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def credential_from_server(
    server_url: str,
    token_file: Path,
    node: str,
    wait: float,
    *,
    ca_file: Path | None = None,
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    session: Any = None,
) -> str:
    """The credential the server gives this pod (POST CREDENTIAL_PATH with its projected ServiceAccount token),
    which must be NODE's; ConfigError when refused, when an https server's certificate does not verify (with
    `ca_file`, else the system's CAs), or when the server stays unreachable for `wait` seconds. Between tries:
    `backoff` (Backoff(): Retry-After honoured, full jitter). `session`: a requests.Session to send with (one
    agent pod asks a few times: default, a new connection each time)."""
    backoff = backoff or Backoff()
    deadline, attempt = time.monotonic() + wait, 0
    while True:
        credential, asked, problem = ask_credential(server_url, token_file, node, ca_file=ca_file, session=session)
        if credential is not None:
            return credential
        pause = backoff.pause(attempt, asked)
        if time.monotonic() + pause > deadline:
            raise ConfigError(f"no agent credential within {wait:g}s: {problem}")
        click.echo(f"waiting {pause:.1f}s for the server ({problem})", err=True)
        sleep(pause)
        attempt += 1


def ask_credential(
    server_url: str, token_file: Path, node: str, *, ca_file: Path | None = None, session: Any = None
) -> tuple[str | None, float | None, str]:
    """One request of credential_from_server: (the credential, None, "") or, when it is worth asking again,
    (None, the Retry-After asked for or None, what went wrong); ConfigError when it is not."""
    import requests

    from remediate.agentwire.protocol import CREDENTIAL_PATH

    url = server_url.rstrip("/") + CREDENTIAL_PATH
    try:
        # Read each time: the kubelet rotates the token.
        token = token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the service account token {token_file}: {exc.strerror}") from exc
    try:
        response = (session or requests).post(
            url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=(5, 30),
            verify=str(ca_file) if ca_file else True,
        )
    except requests.exceptions.SSLError as exc:
        # Not the server starting: the token is not sent to a server that cannot prove who it is.
        where = f"the CA file {ca_file}" if ca_file else "the system's CAs (--ca-file to give yours)"
        raise ConfigError(f"{url}: the server's certificate does not verify with {where}: {exc}") from exc
    except requests.RequestException as exc:
        return None, None, f"{url}: {exc.__class__.__name__}"
    if response.status_code == 200:
        return _credential_of(response, node, url), None, ""
    problem = f"{url}: HTTP {response.status_code} {response.text[:300].strip()}"
    if response.status_code >= 500 and response.status_code not in RETRY_STATUSES:
        raise ConfigError(f"the server cannot hand out agent credentials (fix the server, not this pod): {problem}")
    if response.status_code not in RETRY_STATUSES:
        raise ConfigError(f"the server refused this pod an agent credential: {problem}")
    return None, retry_after(response.headers.get("Retry-After")), problem


def _credential_of(response: Any, node: str, url: str) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("credential"), str) or not body["credential"]:
        raise ConfigError(f"{url}: the answer holds no credential")
    if body.get("node") != node:
        # The server says which node this pod is on; an agent serving another name would refuse every step.
        raise ConfigError(f"{url}: the server gives the credential of node {body.get('node')!r}, not {node!r}")
    return str(body["credential"])
