"""Per-node agent credentials and signed step requests (server -> `remediate agent`).

One shared agent token would let whoever holds it (any node's agent, any pod that reads it)
run any node step on every node. Instead:

- **Each node has its own credential**, `node_token(master, node)` = HMAC-SHA256(master secret,
  node name). The server holds the master (`agent_token`) and computes the credential of the node
  a step is for; an agent holds only its own (`agent_node_token`, printed by `remediate
  agent-credential NODE`), so a leaked agent credential is good for that node alone. (An agent
  given the master instead derives its own credentials from it: simpler, weaker.)
- **Requests are signed, not bearer**: `Authorization: Remediate-HMAC node="...", ts="...",
  nonce="...", sig="..."`, sig = HMAC-SHA256(node credential, method, path, ts, nonce, SHA-256 of
  the body). The body
  names the run and step (run_id, step_index), so the signature binds the call to a run the
  server recorded; the agent refuses a signature for another node, a timestamp more than
  MAX_SKEW seconds off, and a signature it has already seen (replay), and logs every call.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Iterable

SCHEME = "Remediate-HMAC"
MAX_SKEW = 120.0
"""Seconds a signed request stays valid (clock skew between server and agent included)."""
_CONTEXT = b"remediate-agent-node-v1:"
_PARAM = re.compile(r'\s*([a-z]+)="([^"]*)"\s*(?:,|$)')


class AgentAuthError(Exception):
    """The request's credential is missing, malformed, for another node, stale, replayed or wrong."""


class NotThisNode(AgentAuthError):
    """The request is signed for a node this agent is not: the server sent it to the wrong agent."""


def node_token(master: str, node: str) -> str:
    """The credential of `node` derived from the master agent secret (hex)."""
    return hmac.new(master.encode(), _CONTEXT + node.encode(), hashlib.sha256).hexdigest()


def _signature(credential: str, method: str, path: str, timestamp: str, nonce: str, body: bytes) -> str:
    message = "\n".join([method.upper(), path, timestamp, nonce, hashlib.sha256(body).hexdigest()]).encode()
    return hmac.new(credential.encode(), message, hashlib.sha256).hexdigest()


def sign(credential: str, node: str, method: str, path: str, body: bytes, *, now: float | None = None) -> str:
    """The Authorization header value of one request to the agent of `node`."""
    timestamp = f"{time.time() if now is None else now:.3f}"
    # Two identical requests signed in the same millisecond must still differ (the agent refuses replays).
    nonce = secrets.token_hex(8)
    signature = _signature(credential, method, path, timestamp, nonce, body)
    return f'{SCHEME} node="{node}", ts="{timestamp}", nonce="{nonce}", sig="{signature}"'


class Verifier:
    """The agent's side: checks signed requests against the credentials of this node's names."""

    def __init__(self, credentials: dict[str, str], *, max_skew: float = MAX_SKEW) -> None:
        self.credentials = dict(credentials)
        """node name -> its credential (the node's own name, and aliases when the master is known)."""
        self.max_skew = max_skew
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_names(cls, names: Iterable[str], *, master: str | None, own: tuple[str, str] | None) -> Verifier:
        """Credentials of `names` derived from `master`, or only `own` (node, credential) without it."""
        credentials = {name: node_token(master, name) for name in names} if master else {}
        if own is not None:
            credentials[own[0]] = own[1]
        return cls(credentials)

    def verify(self, header: str, method: str, path: str, body: bytes, *, now: float | None = None) -> str:
        """The node name the request is signed for; AgentAuthError otherwise."""
        scheme, _, rest = header.partition(" ")
        if scheme != SCHEME:
            raise AgentAuthError(f"expected Authorization: {SCHEME} node=, ts=, nonce=, sig= (per-node credential)")
        fields = dict(_PARAM.findall(rest))
        node, timestamp, signature = fields.get("node"), fields.get("ts"), fields.get("sig")
        nonce = fields.get("nonce")
        if not node or not timestamp or not signature or not nonce:
            raise AgentAuthError("the Authorization header needs node, ts, nonce and sig")
        credential = self.credentials.get(node)
        if credential is None:
            raise NotThisNode(f"signed for node {node[:80]!r}; this agent holds the credential of {self._names()}")
        try:
            sent_at = float(timestamp)
        except ValueError:
            raise AgentAuthError("ts is not a number") from None
        now = time.time() if now is None else now
        if not abs(now - sent_at) <= self.max_skew:
            when = f"{now - sent_at:.0f}s ago" if now > sent_at else f"{sent_at - now:.0f}s in the future"
            raise AgentAuthError(f"the request was signed {when} (at most {self.max_skew:g}s either way)")
        expected = _signature(credential, method, path, timestamp, nonce, body)
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise AgentAuthError(f"wrong signature for node {node!r} (not the server holding the master secret)")
        with self._lock:
            for old, seen_at in list(self._seen.items()):
                if now - seen_at > 2 * self.max_skew:
                    del self._seen[old]
            if signature in self._seen:
                raise AgentAuthError("this signed request was already used (replay)")
            self._seen[signature] = now
        return node

    def _names(self) -> str:
        return ", ".join(sorted(self.credentials)) or "no node"
