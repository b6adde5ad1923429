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
  MAX_SKEW seconds off, and a signature it has already seen (replay), and logs every call. The
  signatures it has seen are kept in the agent's state file (`agent.state.StateFileSeen`), so a
  request taken off the wire is refused after an agent restart too, not only until it.
- **Answers are signed too**: the agent signs every answer to a request it accepted with the same
  credential, over the request's nonce, path, the HTTP status and the body (`ANSWER_HEADER`); the
  server (`verify_answer`) refuses an answer without it, for another node or another request. So what
  node A holds can neither command node B's agent nor answer in its name.

Where an agent's credential comes from: `remediate agent-credential NODE` (static set-ups: run where
the master is, copy the file to that node only), or, in Kubernetes, the server's
`POST /v1/agent-credential` (remediate.kube.enroll): the agent pod presents its own projected,
audience-bound ServiceAccount token, the server asks the API (TokenReview) which pod it is and hands
out the credential of that pod's node, and of no other.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

SCHEME = "Remediate-HMAC"
MAX_SKEW = 120.0
"""Seconds a signed request stays valid (clock skew between server and agent included)."""
_CONTEXT = b"remediate-agent-node-v1:"
ANSWER_HEADER = "X-Remediate-Answer"
"""The response header that carries the agent's signature of its answer."""
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


def new_nonce() -> str:
    """A request's nonce: two identical requests signed in the same millisecond still differ (the agent refuses
    replays), and the agent's answer names it (so an old answer cannot stand for a new request)."""
    return secrets.token_hex(16)


def sign(
    credential: str,
    node: str,
    method: str,
    path: str,
    body: bytes,
    *,
    now: float | None = None,
    nonce: str | None = None,
) -> str:
    """The Authorization header value of one request to the agent of `node`."""
    timestamp = f"{time.time() if now is None else now:.3f}"
    nonce = nonce or new_nonce()
    signature = _signature(credential, method, path, timestamp, nonce, body)
    return f'{SCHEME} node="{node}", ts="{timestamp}", nonce="{nonce}", sig="{signature}"'


def _answer_signature(credential: str, path: str, nonce: str, status: int, body: bytes) -> str:
    message = "\n".join(["ANSWER", path, nonce, str(status), hashlib.sha256(body).hexdigest()]).encode()
    return hmac.new(credential.encode(), message, hashlib.sha256).hexdigest()


def sign_answer(credential: str, node: str, path: str, nonce: str, status: int, body: bytes) -> str:
    """The ANSWER_HEADER value of the agent's answer (`status`, `body`) to the request with `nonce` on `path`."""
    return f'{SCHEME} node="{node}", nonce="{nonce}", sig="{_answer_signature(credential, path, nonce, status, body)}"'


def verify_answer(
    header: str | None, credential: str, node: str, path: str, nonce: str, status: int, body: bytes
) -> None:
    """The server's side: AgentAuthError unless the answer is signed with `node`'s credential for this request."""
    if not header:
        raise AgentAuthError(f"the answer is not signed (no {ANSWER_HEADER} header)")
    scheme, _, rest = header.partition(" ")
    fields = dict(_PARAM.findall(rest))
    if scheme != SCHEME or not fields.get("sig"):
        raise AgentAuthError(f"{ANSWER_HEADER} is not {SCHEME} node=, nonce=, sig=")
    if fields.get("node") != node:
        raise AgentAuthError(f"the answer is signed for node {str(fields.get('node'))[:80]!r}, not {node!r}")
    if fields.get("nonce") != nonce:
        raise AgentAuthError("the answer is signed for another request (nonce)")
    expected = _answer_signature(credential, path, nonce, status, body)
    if not hmac.compare_digest(expected.encode(), fields["sig"].encode()):
        raise AgentAuthError(f"wrong answer signature for node {node!r} (not that node's agent, or altered)")


class SeenSignatures(Protocol):
    """Where the agent keeps the signatures it has accepted (replay protection)."""

    def first_use(self, signature: str, now: float, keep: float) -> bool:
        """Record `signature` (kept `keep` seconds); False if it was already recorded."""
        ...


class InMemorySeen:
    """Seen signatures in this process only: forgotten when the agent restarts (tests, no state file)."""

    def __init__(self) -> None:
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def first_use(self, signature: str, now: float, keep: float) -> bool:
        with self._lock:
            for old, seen_at in list(self._seen.items()):
                if now - seen_at > keep:
                    del self._seen[old]
            if signature in self._seen:
                return False
            self._seen[signature] = now
            return True


@dataclass(frozen=True)
class SignedRequest:
    """A request the agent accepted: the node it is signed for and its nonce (which the answer names)."""

    node: str
    nonce: str


class Verifier:
    """The agent's side: checks signed requests against the credentials of this node's names."""

    def __init__(
        self, credentials: dict[str, str], *, max_skew: float = MAX_SKEW, seen: SeenSignatures | None = None
    ) -> None:
        self.credentials = dict(credentials)
        """node name -> its credential (the node's own name, and aliases when the master is known)."""
        self.max_skew = max_skew
        self.seen: SeenSignatures = seen or InMemorySeen()

    @classmethod
    def for_names(
        cls,
        names: Iterable[str],
        *,
        master: str | None,
        own: tuple[str, str] | None,
        seen: SeenSignatures | None = None,
    ) -> Verifier:
        """Credentials of `names` derived from `master`, or only `own` (node, credential) without it."""
        credentials = {name: node_token(master, name) for name in names} if master else {}
        if own is not None:
            credentials[own[0]] = own[1]
        return cls(credentials, seen=seen)

    def sign_answer(self, request: SignedRequest, path: str, status: int, body: bytes) -> str:
        """The ANSWER_HEADER of this agent's answer to an accepted request."""
        return sign_answer(self.credentials[request.node], request.node, path, request.nonce, status, body)

    def verify_request(
        self, header: str, method: str, path: str, body: bytes, *, now: float | None = None
    ) -> SignedRequest:
        """The node the request is signed for and its nonce; AgentAuthError otherwise."""
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
        # Kept twice the skew: a signature older than that is refused as stale before it is looked up.
        if not self.seen.first_use(signature, now, 2 * self.max_skew):
            raise AgentAuthError("this signed request was already used (replay)")
        return SignedRequest(node, nonce)

    def _names(self) -> str:
        return ", ".join(sorted(self.credentials)) or "no node"
