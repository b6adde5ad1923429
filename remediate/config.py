"""Settings: one typed object, built once from defaults, a YAML file, the environment and CLI flags.

Precedence, lowest to highest: built-in defaults < config file (``--config`` or
``REMEDIATE_CONFIG``) < ``REMEDIATE_*`` environment variables < command-line flags.
The CLI builds a `Settings` and passes it down; nothing reads the environment later.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from remediate.durations import parse_duration
from remediate.errors import ConfigError
from remediate.kube.model import parse_label_selector

ENV_PREFIX = "REMEDIATE_"
SERVER_MODES = ("enforce", "dry-run")
UI_COOKIE_SECURE = ("auto", "always")
GPU_BACKENDS = ("nvml", "simulated")


@dataclass(frozen=True)
class Settings:
    """Everything the server, the executor and the CLI need to know, grouped by concern."""

    # --- HTTP server
    bind: str = "127.0.0.1:9095"
    """host:port gunicorn listens on."""
    workers: int = 2
    """gunicorn worker processes (HTTP only: the executor runs in a process of its own)."""
    threads: int = 4
    """Threads per gunicorn worker: requests it answers at once (slow clients hold none, see request_timeout)."""
    max_body_bytes: int = 8 * 1024 * 1024
    """Largest webhook body accepted (413 above). A 10,000-alert notification is about 6 MiB; parsing and
    storing one costs a worker about 12 bytes of memory per body byte (~100 MiB at 8 MiB, docs/benchmarks.md)."""
    request_timeout: float = 10.0
    """Seconds a client may take to send one whole request (head and body), server and agent; then it is cut off."""

    # --- auth
    token: str | None = field(default=None, repr=False)
    """The single token of earlier versions (or `token_file`). It now holds only the roles in `token_roles`
    (default: webhook, i.e. POST /webhook only); see docs/api.md#tokens."""
    token_file: Path | None = None
    token_roles: tuple[str, ...] = ("webhook",)
    """Roles of the `token` (webhook, operator, read). `webhook,operator` keeps the old all-powerful token."""
    webhook_token: str | None = field(default=None, repr=False)
    """Token AlertManager sends: may only POST /webhook (or `webhook_token_file`). Principal `webhook`."""
    webhook_token_file: Path | None = None
    operator_token: str | None = field(default=None, repr=False)
    """Token of operators: approve, pause, resume, breaker reset, and every read. Principal `operator`."""
    operator_token_file: Path | None = None
    tokens_file: Path | None = None
    """YAML file of named tokens, `name: token` (operator role) or `name: {token: ..., roles: [read]}`;
    the name is the principal recorded as who approved, paused, resumed or reset."""
    read_token: str | None = field(default=None, repr=False)
    """Optional token that may only read /history, /runs, /pause and /breaker. Principal `read`."""
    read_token_file: Path | None = None
    insecure_no_auth: bool = False
    """Serve without any token. Only for local experiments; logged loudly."""

    # --- playbooks and store
    playbooks: Path = Path("playbooks")
    database_url: str = "sqlite:///remediate.db"
    """SQLAlchemy URL of the history and run queue. A libpq URL (`postgresql://`, `postgres://`, as
    CloudNativePG's `<cluster>-app` Secret holds it) is read as `postgresql+psycopg://`."""
    store_busy_timeout: float = 5.0
    """Seconds a request waits for the database write lock before answering 503 (AlertManager retries)."""
    database_pool_size: int = 5
    """PostgreSQL: connections each process (every HTTP worker, the executor) keeps open."""
    database_max_overflow: int = 5
    """PostgreSQL: connections each process may open beyond the pool under load; never more than
    pool size + this per process, so replicas x (workers + 1) x that stays under max_connections."""
    mode: str = "enforce"
    """enforce: playbook modes apply. dry-run (shadow mode): every run only plans."""
    retention: float = 90 * 86400.0
    """Seconds of history kept: the server prunes finished runs, the decisions that made no run and old
    notifications (hourly, in small batches). 0 or `off`: keep everything. At least 1d (max_attempts counts
    the last 24 h); the server keeps at least the longest playbook cooldown whatever this says."""

    # --- executor
    executor_threads: int = 4
    poll_interval: float = 0.2
    """Seconds an idle executor waits before looking for runs queued by another process."""
    step_timeout: float = 300.0
    """Default per-step timeout in seconds (a step may set its own `timeout`)."""
    lease: float = 60.0
    """How long a run's owner holds it without renewing: its executor renews the lease (a heartbeat every
    lease/4, at most 5 s apart, from a thread of its own, so a long step keeps it); another replica takes
    the run over once the heartbeat has not changed for this long. At least 2 s. Old name: `stale_after`."""
    replica_name: str | None = None
    """The name this server's executor records as who ran each attempt (`ran_on` in the history) and
    claims runs under, with its pid; default: the host name (a pod's name in Kubernetes). Replicas on one
    host need distinct names to be told apart by their leases."""

    # --- notify.webhook
    notify_timeout: float = 10.0

    # --- GPUs (node-local steps)
    gpu_backend: str = "nvml"
    """nvml (the real driver) or simulated (a device file; only ever chosen explicitly)."""
    gpu_simulator_file: Path | None = None
    """Device file of the simulated backend (YAML/JSON; see remediate.gpu.simulator)."""

    # --- disk cleanup (node-local steps)
    cleanup_policies_file: Path | None = None
    """YAML file of the node's cleanup policies (docs/cleanup-policies.example.yaml); read when first needed."""

    # --- training jobs (node-local steps: training.rollback, training.scale_lr, training.checkpoint)
    training_control_root: Path = Path("/run/remediate/training")
    """Control directory shared with training jobs (docs/training-protocol.md); never taken from a label."""
    training_job_labels: tuple[str, ...] = ("training_job", "job", "job_name", "exported_job", "exported_pod", "pod")
    """Alert labels that may name the training job; the first whose value is a registered job wins."""

    # --- node agent (`remediate agent`) and where the server runs node-local steps
    node_name: str | None = None
    """This process's node. Server: node steps whose target is this node run in the server itself (leave
    unset in Kubernetes); without agents, the only target (with node_aliases) node steps run for (unset:
    the host name). Agent: the only target it accepts (and node_aliases); default there: the host name."""
    node_aliases: tuple[str, ...] = ()
    """Agent, and a server without agents: other names alerts may give this node (e.g. its FQDN);
    comma-separated in the environment."""
    agents: tuple[tuple[str, str], ...] = ()
    """Server: static map node -> agent URL (`agents: {node-a: http://10.0.0.5:9096}`; env `node-a=URL,...`)."""
    agent_selector: str | None = None
    """Server: label selector of the agent DaemonSet's pods; when set, agents are found through the Kubernetes API."""
    agent_namespace: str | None = None
    """Server: namespace of the agent pods (default: the server pod's own namespace)."""
    agent_port: int = 9096
    agent_daemonset: str | None = None
    """Server: name of the agent DaemonSet; a discovered pod must be controlled by it (unset: by any DaemonSet)."""
    agent_audience: str = "remediate-agent"
    """Server, with agent_selector: the audience of the projected ServiceAccount token an agent pod presents to
    POST /v1/agent-credential (checked by TokenReview) to get its own node's credential."""
    agent_service_account: str | None = None
    """Server, with agent_selector: the agent pods' ServiceAccount; a token of another account gets no
    credential (unset: any account of agent_namespace)."""
    """Server: port of agents found through the Kubernetes API."""
    agent_token: str | None = field(default=None, repr=False)
    """Bearer token between the server and its agents (both sides; or `agent_token_file`)."""
    agent_token_file: Path | None = None
    agent_node_token: str | None = field(default=None, repr=False)
    """Agent: this node's own credential, HMAC(agent_token, node_name) (`remediate agent-credential NODE`);
    with it the agent needs no `agent_token` and accepts only requests signed for its own node."""
    agent_node_token_file: Path | None = None
    agent_retries: int = 3
    """Server: retries of one call to an agent that cannot be reached (connection refused, no agent pod yet)."""
    agent_connect_timeout: float = 3.0
    agent_bind: str = "127.0.0.1:9096"
    """Agent: host:port it listens on."""
    agent_threads: int = 8
    """Agent: steps it runs at once (a further step waits for one to end; health checks and cancels never wait)."""
    agent_state_file: Path = Path("remediate-agent.db")
    """Agent: SQLite file of what node actions remember (e.g. the power limit a restore puts back)."""
    gpu_power_floor_watts: float | None = None
    """Refuse to set any GPU's power limit below this (wherever node steps run); an agent's own limit."""
    gpu_power_floor_percent: float | None = None
    """Refuse to set a GPU's power limit below this % of its default limit."""

    # --- Kubernetes (k8s.* steps)
    kubeconfig: Path | None = None
    """kubeconfig file of the cluster; unset: the in-cluster service account inside a pod, else the
    client's own discovery ($KUBECONFIG, then ~/.kube/config)."""
    kube_context: str | None = None
    """Context of the kubeconfig to use (default: its current context)."""
    kube_request_timeout: float = 10.0
    """Seconds one Kubernetes API request may take; longer counts as a transient error (retried)."""
    kube_node_labels: tuple[str, ...] = ("node", "kubernetes_node", "Hostname", "hostname", "instance")
    """Alert labels that name the node of a k8s.* step, in order (instance loses its port)."""
    kube_node_selector: str | None = None
    """Label selector of the nodes k8s.cordon/taint/drain may act on (e.g. nvidia.com/gpu.present=true);
    unset: breaker_node_selector; both unset: any node. Uncordon and untaint are never refused by it."""
    kube_allow_control_plane: bool = False
    """Let k8s.cordon/taint/drain act on control-plane nodes (label node-role.kubernetes.io/control-plane)."""

    # --- check.prometheus steps, and the reliability report (issue 12)
    prometheus_url: str | None = None
    """Base URL of the Prometheus HTTP API that `check.prometheus` steps query (e.g. http://prometheus:9090);
    never taken from a label. Unset: such a step fails saying so."""
    prometheus_bearer_token_file: Path | None = None
    """File holding a bearer token for that Prometheus (e.g. a mounted Secret), read at each query."""
    report_window: float = 7 * 86400.0
    """The window of the reliability figures on /metrics (`remediate_report_*`): the last 7 days by default.
    0: none on /metrics (which needs no token; the figures name nodes and jobs). GET /report is unaffected."""
    report_cache: float = 60.0
    """Seconds a process reuses the reliability figures it computed for /metrics before reading the store again."""
    report_job_labels: tuple[str, ...] = ("training_job", "job")
    """Alert labels naming an incident's training job in the report and /metrics, in order (the first wins)."""

    # --- links in chat messages (issue 13)
    public_url: str | None = None
    """remediate's base URL as people reach it (e.g. https://remediate.example.com): notify.slack and notify.teams
    link to `{public_url}/ui/runs/<id>`, notify.webhook sends it as `run_url`, message templates read it as
    `run.link`. Unset: their messages carry no links."""
    # --- Grafana annotations of executed runs (issue 13, docs/grafana.md)
    grafana_url: str | None = None
    """Base URL of a Grafana (http/https): each executed run (succeeded or failed) is posted to its
    /api/annotations. Unset: no annotations."""
    grafana_token_file: Path | None = None
    """File holding a Grafana service-account token (read once at start, never logged)."""

    # --- circuit breaker of cluster actions (k8s.cordon, k8s.taint, k8s.drain)
    breaker_max_fraction: float = 0.10
    """At most this share of the (selected) nodes held by remediate now or changed within the window."""
    breaker_max_nodes: int = 3
    """... and at most this many. Cap = min(fraction x nodes, max_nodes), at least 1 when both are > 0."""
    breaker_window: float = 600.0
    """Seconds over which changed nodes are counted."""
    breaker_node_selector: str | None = None
    """Label selector of the nodes the fraction is taken of (e.g. nvidia.com/gpu.present=true); unset: all."""
    breaker_stale_horizon: float = 900.0
    """After a breaker reset, alerts that started before it and longer ago than this are recorded as stale."""

    # --- web pages (/ui/, docs/ui.md)
    ui: bool = True
    """Serve the web pages under /ui/ (history, run pages, pause/breaker/approvals); false: /ui/* is 404."""
    ui_secret_file: Path | None = None
    """File of the key that signs the pages' session cookies (shared by every worker and replica). Unset:
    derived from the configured tokens, so changing a token ends every session."""
    ui_cookie_secure: str = "auto"
    """The session cookie's `Secure` flag. auto: when the page was asked for over https as the server sees
    it; always: on every cookie, for a server behind a proxy that terminates TLS and forwards plain http."""

    @property
    def stale_after(self) -> float:
        """The lease's old name (issue 11): still read, as a setting and here."""
        return self.lease

    def resolved_token(self) -> str | None:
        return _token(self.token, self.token_file, "token")

    def resolved_read_token(self) -> str | None:
        return _token(self.read_token, self.read_token_file, "read_token")

    def resolved_operator_token(self) -> str | None:
        return _token(self.operator_token, self.operator_token_file, "operator_token")

    def credentials(self) -> list[Credential]:
        """Every token the server accepts, with its principal name and roles; ConfigError on a bad one."""
        found: list[Credential] = []
        fixed = (
            ("token", self.resolved_token(), frozenset(self.token_roles)),
            ("webhook", _token(self.webhook_token, self.webhook_token_file, "webhook_token"), frozenset([WEBHOOK])),
            ("operator", self.resolved_operator_token(), frozenset({OPERATOR})),
            ("read", self.resolved_read_token(), frozenset({READ})),
        )
        found.extend(Credential(name, token, frozenset(roles)) for name, token, roles in fixed if token)
        if self.tokens_file is not None:
            found.extend(_read_tokens_file(self.tokens_file))
        seen: dict[str, str] = {}
        for credential in found:
            if credential.token in seen:
                first = seen[credential.token]
                raise ConfigError(f"tokens {first!r} and {credential.name!r} are the same: give each its own")
            seen[credential.token] = credential.name
        return found

    def resolved_agent_token(self) -> str | None:
        return _token(self.agent_token, self.agent_token_file, "agent_token")

    def resolved_agent_node_token(self) -> str | None:
        return _token(self.agent_node_token, self.agent_node_token_file, "agent_node_token")

    def resolved_grafana_token(self) -> str | None:
        return _secret(None, self.grafana_token_file, "grafana_token")

    def agent_map(self) -> dict[str, str]:
        """The static `agents` map: node name -> agent base URL."""
        return dict(self.agents)


WEBHOOK = "webhook"
OPERATOR = "operator"
READ = "read"
ROLES = (WEBHOOK, OPERATOR, READ)


@dataclass(frozen=True)
class Credential:
    """One accepted token: `name` is the principal recorded for what it does; operator implies read."""

    name: str
    token: str = field(repr=False)
    roles: frozenset[str]

    def allows(self, role: str) -> bool:
        return role in self.roles or (role == READ and OPERATOR in self.roles)


def check_server_credentials(settings: Settings) -> list[Credential]:
    """The server's tokens; ConfigError when none may do more than read (unless insecure_no_auth)."""
    credentials = settings.credentials()
    if not any(c.roles - {READ} for c in credentials) and not settings.insecure_no_auth:
        raise ConfigError(
            "no token configured: set REMEDIATE_WEBHOOK_TOKEN and REMEDIATE_OPERATOR_TOKEN (or REMEDIATE_TOKEN, "
            "--token-file, tokens_file; or, for local experiments only, --insecure-no-auth)"
        )
    return credentials


FIXED_PRINCIPALS = {"token": "token", WEBHOOK: "webhook_token", OPERATOR: "operator_token", READ: "read_token"}
"""The principal names of the single-token settings: no `tokens_file` entry may take one (in any case),
configured or not, so that a name in the history always means one credential."""


def _read_tokens_file(path: Path) -> list[Credential]:
    class UniqueKeys(yaml.SafeLoader):
        """safe_load, but a name given twice is an error: YAML's own rule keeps the last one silently."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            names = [self.construct_object(key, deep=True) for key, _ in node.value]
            twice = sorted({str(name) for name in names if names.count(name) > 1})
            if twice:
                raise ConfigError(f"tokens_file {path}: {twice[0][:40]!r} is given twice: one entry per name")
            return super().construct_mapping(node, deep=deep)

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeys)  # noqa: S506 - a safe loader
    except OSError as exc:
        raise ConfigError(f"cannot read tokens_file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"tokens_file {path} is not valid YAML") from exc
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"tokens_file {path}: must be a mapping of names to tokens (name: token)")
    result = []
    for name, entry in data.items():
        where = f"tokens_file {path}, {str(name)[:40]!r}"
        token, roles = (entry, [OPERATOR]) if isinstance(entry, str) else (None, None)
        if isinstance(entry, dict):
            token, roles = entry.get("token"), entry.get("roles", [OPERATOR])
        if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_CHARS:
            raise ConfigError(f"{where}: the token must be a string of at least {MIN_TOKEN_CHARS} characters")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}", str(name)):
            raise ConfigError(f"{where}: names are letters, digits, _.@- (at most 63)")
        if str(name).lower() in FIXED_PRINCIPALS:
            raise ConfigError(
                f"{where}: the name is the principal of the {FIXED_PRINCIPALS[str(name).lower()]} setting "
                f"({', '.join(FIXED_PRINCIPALS)} are reserved): give the entry a name of its own"
            )
        try:
            role_set = frozenset(_to_roles(roles))
        except ValueError as exc:
            raise ConfigError(f"{where}: roles {exc}") from None
        result.append(Credential(str(name), token.strip(), role_set))
    return result


def _to_roles(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"must be a list of roles ({', '.join(ROLES)})")
    roles = tuple(str(item).strip() for item in items if str(item).strip())
    bad = [role for role in roles if role not in ROLES]
    if bad or not roles:
        raise ValueError(f"must name roles among {', '.join(ROLES)}, got {value!r}")
    return roles


MIN_TOKEN_CHARS = 16
"""The shortest token accepted, wherever it is set (environment, file, tokens_file, agent tokens): a short
one is guessed through the API or the login page long before anything notices."""
_MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one"


def _token(value: str | None, path: Path | None, name: str) -> str | None:
    """A bearer token of setting `name` (or its file); ConfigError, naming where it came from, when short."""
    token = _secret(value, path, name)
    if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
        where = f"{name} ({ENV_PREFIX}{name.upper()})" if value else f"{name}_file {path}"
        raise ConfigError(
            f"{where}: a token needs at least {MIN_TOKEN_CHARS} characters, not {len(token.strip())}; {_MAKE_ONE}"
        )
    return token


def _secret(value: str | None, path: Path | None, name: str) -> str | None:
    if value:
        return value
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {name}_file {path}: {exc.strerror}") from exc
    if not text:
        raise ConfigError(f"{name}_file {path} is empty")
    return text


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _to_positive_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("not an integer")
    number = int(value)
    if number < 0:
        raise ValueError("must not be negative")
    return number


def _to_at_least_one(value: Any) -> int:
    number = _to_positive_int(value)
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _to_seconds(value: Any) -> float:
    # Numbers go through parse_duration too, which refuses negative, infinite and NaN values.
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    return parse_duration(str(value)).total_seconds()


MIN_LEASE_S = 2.0
"""The shortest lease accepted: heartbeats go every lease/4 but never more often than every 0.5 s,
so a shorter lease would leave an owner less than four heartbeats to renew it."""


def _to_lease(value: Any) -> float:
    seconds = _to_seconds(value)
    if seconds < MIN_LEASE_S:
        raise ValueError(
            f"a lease of {seconds:g}s is too short: at least {MIN_LEASE_S:g}s, so that an owner renews it "
            "several times over (a few times its heartbeat plus a slow database write)"
        )
    return seconds


def _to_mode(value: Any) -> str:
    text = str(value)
    if text not in SERVER_MODES:
        raise ValueError(f"must be one of {', '.join(SERVER_MODES)}")
    return text


MIN_RETENTION = 86400.0
"""max_attempts counts a target's runs of the last 24 h (remediate.guards.ATTEMPT_WINDOW): keep at least those."""


def _to_retention(value: Any) -> float:
    """A duration of at least 1d, or 0 / off (keep everything)."""
    if isinstance(value, str) and value.strip().lower() in ("off", "0", "never"):
        return 0.0
    seconds = _to_seconds(value)
    if 0 < seconds < MIN_RETENTION:
        raise ValueError("must be at least 1d (max_attempts counts the runs of the last 24 h), or off")
    return seconds


# The image ships psycopg 3 only (the `postgres` extra); SQLAlchemy reads a bare `postgresql://` as
# psycopg2 and `postgres://` not at all, so a libpq URL straight from an operator's Secret would fail.
_LIBPQ_SCHEME = re.compile(r"^(postgresql|postgres)://")


def _to_database_url(value: Any) -> str:
    return _LIBPQ_SCHEME.sub("postgresql+psycopg://", str(value), count=1)


def _to_cookie_secure(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in UI_COOKIE_SECURE:
        raise ValueError(f"must be one of {', '.join(UI_COOKIE_SECURE)}, got {value!r}")
    return text


def _to_gpu_backend(value: Any) -> str:
    text = str(value)
    if text not in GPU_BACKENDS:
        raise ValueError(f"must be one of {', '.join(GPU_BACKENDS)}")
    return text


def _to_optional_path(value: Any) -> Path | None:
    return Path(value) if value not in (None, "") else None


def _to_directory(value: Any) -> Path:
    if value in (None, "") or not str(value).strip():
        raise ValueError("must be a directory path")
    return Path(str(value))


def _to_label_names(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("must be a list of label names (or a comma-separated string)")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    if not names:
        raise ValueError("must name at least one label")
    bad = [name for name in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)]
    if bad:
        raise ValueError(f"not label names: {', '.join(bad)}")
    return names


def _to_optional_str(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    return text or None


def _to_optional_selector(value: Any) -> str | None:
    """A label selector string (checked here, so a typo fails at start, not at the first cordon)."""
    text = _to_optional_str(value)
    if text is not None:
        parse_label_selector(text)  # SelectorError is a ValueError: reported with the setting's name
    return text


def _to_audience(value: Any) -> str:
    text = _to_optional_str(value)
    if text is None:
        raise ValueError("must be a non-empty string (the audience of the agents' projected token)")
    return text


def _to_optional_url(value: Any, name: str) -> str | None:
    text = _to_optional_str(value)
    if text is None:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{name} must be an absolute http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def _to_names(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("must be a list of names (or a comma-separated string)")
    return tuple(str(item).strip() for item in items if str(item).strip())


def _to_agents(value: Any) -> tuple[tuple[str, str], ...]:
    """`{node: url}` (config file) or `node=url,node=url` (environment)."""
    if isinstance(value, str):
        pairs: list[tuple[Any, Any]] = []
        for item in value.split(","):
            if not item.strip():
                continue
            node, sep, url = item.partition("=")
            if not sep:
                raise ValueError(f"expected node=URL, got {item.strip()!r}")
            pairs.append((node, url))
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    elif value is None:
        pairs = []
    else:
        raise ValueError("must be a mapping of node name to agent URL")
    result = []
    for node, url in pairs:
        node_text, url_text = str(node).strip(), str(url).strip().rstrip("/")
        if not node_text:
            raise ValueError("a node name is empty")
        if not re.fullmatch(r"https?://[^\s/]+(/[^\s]*)?", url_text):
            raise ValueError(f"agent URL of {node_text!r} must be http(s)://host:port, got {url!r}")
        result.append((node_text, url_text))
    return tuple(sorted(result))


def _to_optional_percent(value: Any) -> float | None:
    if value in (None, ""):
        return None
    number = _to_optional_watts(value)
    if number is not None and number > 100:
        raise ValueError("must be at most 100")
    return number


def _to_optional_watts(value: Any) -> float | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError("not a number")
    number = float(value)
    if not number > 0 or number == float("inf"):
        raise ValueError("must be a positive number")
    return number


def _to_fraction(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("not a number")
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError("must be between 0 and 1 (0.1 = 10% of the nodes)")
    return number


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "bind": str,
    "workers": _to_positive_int,
    "threads": _to_positive_int,
    "max_body_bytes": _to_positive_int,
    "request_timeout": _to_seconds,
    "store_busy_timeout": _to_seconds,
    "database_pool_size": _to_at_least_one,
    "database_max_overflow": _to_positive_int,
    "token": str,
    "token_file": _to_optional_path,
    "token_roles": _to_roles,
    "webhook_token": str,
    "webhook_token_file": _to_optional_path,
    "operator_token": str,
    "operator_token_file": _to_optional_path,
    "tokens_file": _to_optional_path,
    "read_token": str,
    "read_token_file": _to_optional_path,
    "insecure_no_auth": _to_bool,
    "ui": _to_bool,
    "ui_secret_file": _to_optional_path,
    "ui_cookie_secure": _to_cookie_secure,
    "playbooks": Path,
    "database_url": _to_database_url,
    "mode": _to_mode,
    "retention": _to_retention,
    "executor_threads": _to_positive_int,
    "poll_interval": _to_seconds,
    "step_timeout": _to_seconds,
    "lease": _to_lease,
    "replica_name": _to_optional_str,
    "notify_timeout": _to_seconds,
    "gpu_backend": _to_gpu_backend,
    "gpu_simulator_file": _to_optional_path,
    "cleanup_policies_file": _to_optional_path,
    "training_control_root": _to_directory,
    "training_job_labels": _to_label_names,
    "node_name": _to_optional_str,
    "node_aliases": _to_names,
    "agents": _to_agents,
    "agent_selector": _to_optional_str,
    "agent_namespace": _to_optional_str,
    "agent_port": _to_positive_int,
    "agent_daemonset": _to_optional_str,
    "agent_audience": _to_audience,
    "agent_service_account": _to_optional_str,
    "agent_token": str,
    "agent_token_file": _to_optional_path,
    "agent_node_token": str,
    "agent_node_token_file": _to_optional_path,
    "agent_retries": _to_positive_int,
    "agent_connect_timeout": _to_seconds,
    "agent_bind": str,
    "agent_threads": _to_positive_int,
    "agent_state_file": Path,
    "gpu_power_floor_watts": _to_optional_watts,
    "gpu_power_floor_percent": _to_optional_percent,
    "kubeconfig": _to_optional_path,
    "kube_context": _to_optional_str,
    "kube_request_timeout": _to_seconds,
    "kube_node_labels": _to_label_names,
    "kube_node_selector": _to_optional_selector,
    "kube_allow_control_plane": _to_bool,
    "breaker_max_fraction": _to_fraction,
    "breaker_max_nodes": _to_positive_int,
    "breaker_window": _to_seconds,
    "breaker_node_selector": _to_optional_selector,
    "breaker_stale_horizon": _to_seconds,
    "prometheus_url": lambda value: _to_optional_url(value, "prometheus_url"),
    "public_url": lambda value: _to_optional_url(value, "public_url"),
    "prometheus_bearer_token_file": _to_optional_path,
    "grafana_url": lambda value: _to_optional_url(value, "grafana_url"),
    "grafana_token_file": _to_optional_path,
    "report_window": _to_seconds,
    "report_cache": _to_seconds,
    "report_job_labels": _to_label_names,
}
assert set(_CONVERTERS) == {f.name for f in dataclasses.fields(Settings)}
_ALIASES = {"stale_after": "lease"}
"""Old names of settings, still read (file, environment, flags) as the new one."""


def _convert(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    unknown = [key for key in values if _canonical(str(key)) not in _CONVERTERS]
    if unknown:
        known = ", ".join(sorted(_CONVERTERS))
        names = ", ".join(repr(key) for key in unknown)
        raise ConfigError(f"{source}: unknown setting{'s' if len(unknown) > 1 else ''} {names} (known: {known})")
    converted: dict[str, Any] = {}
    for key, raw in values.items():
        name = _canonical(key)
        if name in converted:  # `lease` and its old name `stale_after` both: which one was meant?
            raise ConfigError(f"{source}: setting {key!r} is given twice (also as {name!r}): keep one")
        try:
            converted[name] = _CONVERTERS[name](raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: setting {key!r}: {exc}") from exc
    return converted


def _canonical(key: str) -> str:
    name = key.replace("-", "_")
    return _ALIASES.get(name, name)


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of settings")
    return _convert(data, f"config file {path}")


def settings_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values = {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in env.items()
        if key.startswith(ENV_PREFIX) and _canonical(key[len(ENV_PREFIX) :].lower()) in _CONVERTERS
    }
    return _convert(values, "environment")


def load_settings(
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge defaults < config file < environment < overrides (CLI flags; None values are ignored)."""
    env = os.environ if env is None else env
    if config_file is None and env.get(f"{ENV_PREFIX}CONFIG"):
        config_file = Path(env[f"{ENV_PREFIX}CONFIG"])
    merged: dict[str, Any] = {}
    if config_file is not None:
        merged.update(read_config_file(config_file))
    merged.update(settings_from_env(env))
    merged.update(_convert({k: v for k, v in (overrides or {}).items() if v is not None}, "command line"))
    return Settings(**merged)
