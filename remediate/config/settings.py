"""Settings: one typed object of small frozen sections, built once from defaults, a YAML file, the environment and CLI
flags. Precedence, lowest to highest: built-in defaults < config file (``--config`` or ``REMEDIATE_CONFIG``) <
``REMEDIATE_*`` environment variables < command-line flags. The CLI builds a `Settings` and passes it down; nothing
reads the environment later. What users write stays flat (`kube_context`, `REMEDIATE_KUBE_CONTEXT`, `--kube-context`);
the code reads it by section (`settings.kube.context`). Each setting is declared once, by `setting()` in its section:
its default, its converter and its flat name (the section's `PREFIX` + the field's name unless it says otherwise). Each
part of the server takes only its section: the executor `settings.executor`, an action family the section it names
(`Action.settings_section`), ..."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from remediate.config import values as v
from remediate.config.burnin import BurninSettings
from remediate.config.fields import setting
from remediate.config.schedulers import DEFAULT_SCHEDULERS, Scheduler, to_schedulers
from remediate.config.values import ENV_PREFIX, MIN_RETENTION, OPERATOR, READ, WEBHOOK, Credential
from remediate.errors import ConfigError

__all__ = ["MIN_RETENTION", "OPERATOR", "READ", "WEBHOOK", "ConfigError", "Credential", "Settings", "load_settings"]


@dataclass(frozen=True)
class ServerSettings:
    """The HTTP server (gunicorn)."""

    bind: str = setting("127.0.0.1:9095", str)
    """host:port gunicorn listens on."""
    workers: int = setting(2, v.to_positive_int)
    """gunicorn worker processes (HTTP only: the executor runs in a process of its own)."""
    threads: int = setting(4, v.to_positive_int)
    """Threads per gunicorn worker: requests it answers at once (slow clients hold none, see request_timeout)."""
    max_body_bytes: int = setting(8 * 1024 * 1024, v.to_positive_int)
    """Largest webhook body accepted (413 above). A 10,000-alert notification is about 6 MiB; parsing and
    storing one costs a worker about 12 bytes of memory per body byte (~100 MiB at 8 MiB, docs/benchmarks.md)."""
    request_timeout: float = setting(10.0, v.to_seconds)
    """Seconds a client may take to send one whole request (head and body), server and agent; then it is cut off."""
    worker_timeout: float = setting(60.0, v.to_worker_timeout)
    """Seconds an HTTP worker's event loop may stay silent before its master kills and replaces it (gunicorn's
    `timeout`). A slow request holds a thread, not the loop: it may outlive this."""
    tls_cert_file: Path | None = setting(None, v.to_optional_path)
    """PEM certificate (chain) to serve HTTPS with, and tls_key_file its key: both or neither (default: HTTP)."""
    tls_key_file: Path | None = setting(None, v.to_optional_path)
    """PEM private key of tls_cert_file (both or neither)."""
    config_file: Path | None = setting(None, v.to_optional_path, flat="config")
    """The settings file read at start (--config or REMEDIATE_CONFIG): a reload (SIGHUP, POST /-/reload) reads
    its `sinks` again."""


@dataclass(frozen=True)
class AuthSettings:
    """The server's tokens."""

    token: str | None = setting(None, str, secret=True)
    """The single token of earlier versions (or `token_file`). It now holds only the roles in `token_roles`
    (default: webhook, i.e. POST /webhook only); see README, "Tokens and roles"."""
    token_file: Path | None = setting(None, v.to_optional_path)
    """File holding `token` (a mounted Secret), read at start."""
    token_roles: tuple[str, ...] = setting(("webhook",), v.to_roles)
    """Roles of the `token` (webhook, operator, read). `webhook,operator` keeps the old all-powerful token."""
    webhook_token: str | None = setting(None, str, secret=True)
    """Token AlertManager sends: may only POST /webhook (or `webhook_token_file`). Principal `webhook`."""
    webhook_token_file: Path | None = setting(None, v.to_optional_path)
    """File holding `webhook_token` (a mounted Secret), read at start."""
    operator_token: str | None = setting(None, str, secret=True)
    """Token of operators: approve, pause, resume, breaker reset, and every read. Principal `operator`."""
    operator_token_file: Path | None = setting(None, v.to_optional_path)
    """File holding `operator_token` (a mounted Secret), read at start."""
    tokens_file: Path | None = setting(None, v.to_optional_path)
    """YAML file of named tokens, `name: token` (operator role) or `name: {token: ..., roles: [read]}`;
    the name is the principal recorded as who approved, paused, resumed or reset."""
    read_token: str | None = setting(None, str, secret=True)
    """Optional token that may only read /history, /runs, /pause and /breaker. Principal `read`."""
    read_token_file: Path | None = setting(None, v.to_optional_path)
    """File holding `read_token` (a mounted Secret), read at start."""
    insecure_no_auth: bool = setting(False, v.to_bool)
    """Serve without any token. Only for local experiments; logged loudly."""

    def resolved(self, name: str) -> str | None:
        """The token of setting `name` (token, webhook_token, operator_token, read_token) or of its file."""
        return v.token_from(getattr(self, name), getattr(self, f"{name}_file"), name)

    def credentials(self) -> list[Credential]:
        """Every token the server accepts, with its principal name and roles; ConfigError on a bad one."""
        found: list[Credential] = []
        fixed = (
            ("token", self.resolved("token"), self.token_roles),
            ("webhook", self.resolved("webhook_token"), {WEBHOOK}),
            ("operator", self.resolved("operator_token"), {OPERATOR}),
            ("read", self.resolved("read_token"), {READ}),
        )
        found.extend(Credential(name, token, frozenset(roles)) for name, token, roles in fixed if token)
        if self.tokens_file is not None:
            found.extend(v.read_tokens_file(self.tokens_file))
        seen: dict[str, str] = {}
        for credential in found:
            if credential.token in seen:
                first = seen[credential.token]
                raise ConfigError(f"tokens {first!r} and {credential.name!r} are the same: give each its own")
            seen[credential.token] = credential.name
        return found


@dataclass(frozen=True)
class StoreSettings:
    """The database of the history and the run queue."""

    url: str = setting("sqlite:///remediate.db", v.to_database_url, flat="database_url")
    """SQLAlchemy URL of the history and run queue. A libpq URL (`postgresql://`, `postgres://`, as
    CloudNativePG's `<cluster>-app` Secret holds it) is read as `postgresql+psycopg://`."""
    busy_timeout: float = setting(5.0, v.to_seconds, flat="store_busy_timeout")
    """Seconds a request waits for the database write lock before answering 503 (AlertManager retries)."""
    pool_size: int = setting(5, functools.partial(v.to_positive_int, minimum=1), flat="database_pool_size")
    """PostgreSQL: connections each process (every HTTP worker, the executor) keeps open."""
    max_overflow: int = setting(5, v.to_positive_int, flat="database_max_overflow")
    """PostgreSQL: connections each process may open beyond the pool under load; never more than
    pool size + this per process, so replicas x (workers + 1) x that stays under max_connections."""
    retention: float = setting(90 * 86400.0, v.to_retention)
    """Seconds of history kept: the server prunes finished runs, the decisions that made no run and old
    notifications (hourly, in small batches). 0 or `off`: keep everything. At least 1d (max_attempts counts
    the last 24 h); the server keeps at least the longest playbook cooldown whatever this says."""


@dataclass(frozen=True)
class EngineSettings:
    """What the engine judges alerts by: the playbooks, the server's mode, a step's default timeout."""

    playbooks: Path = setting(Path("playbooks"), Path)
    """Directory of the playbook YAML files (re-read on SIGHUP or POST /-/reload)."""
    mode: str = setting("enforce", v.one_of("enforce", "dry-run"))
    """enforce: playbook modes apply. dry-run (shadow mode): every run only plans."""
    step_timeout: float = setting(300.0, v.to_seconds)
    """Default per-step timeout in seconds (a step may set its own `timeout`)."""
    rollout: v.Rollout | None = setting(None, v.to_rollout)  # remediate.config.rollout
    """Staged rollout of every playbook without its own `rollout:` (`{label: remediate.io/wave, waves:
    {"1": enforce}, default: dry-run}`, or `{slurm: feature, waves: {wave1: enforce}}`: waves from Slurm
    features or partitions), YAML/JSON in the environment (docs/playbooks.md, "Staged rollout")."""
    rollout_nodes: tuple[tuple[str, str], ...] = setting((), v.to_rollout_nodes)  # {host-a: "1"}: hosts without k8s
    """The wave of hosts without Kubernetes, `{host-a: "1"}` (YAML/JSON in the environment)."""
    schedulers: tuple[Scheduler, ...] = setting(DEFAULT_SCHEDULERS, to_schedulers, flat="schedulers")
    """The schedulers whose node steps the playbooks run: kubernetes, slurm, both (Slurm on Kubernetes) or none;
    the steps of another are left out when the playbooks load (remediate.config.schedulers, docs/playbooks.md)."""


@dataclass(frozen=True)
class ExecutorSettings:
    """The executor: its threads, how it looks for runs, its lease and its name."""

    threads: int = setting(4, v.to_positive_int, flat="executor_threads")
    """Threads of the executor process: runs it executes at once (0: no executor in this server)."""
    poll_interval: float = setting(0.2, v.to_seconds)
    """Seconds an idle executor waits before looking for runs queued by another process."""
    lease: float = setting(60.0, v.to_lease)
    """How long a run's owner holds it without renewing: its executor renews the lease (a heartbeat every
    lease/4, at most 5 s apart, from a thread of its own, so a long step keeps it); another replica takes
    the run over once the heartbeat has not changed for this long. At least 2 s. Old name: `stale_after`."""
    replica_name: str | None = setting(None, v.to_optional_str)
    """The name this server's executor records as who ran each attempt (`ran_on` in the history) and
    claims runs under, with its pid; default: the host name (a pod's name in Kubernetes). Replicas on one
    host need distinct names to be told apart by their leases."""


@dataclass(frozen=True)
class NotifySettings:
    """notify steps (the named sinks; notify.webhook, Slack, Teams) and the links in their messages."""

    PREFIX: ClassVar[str] = "notify_"
    timeout: float = setting(10.0, v.to_seconds)
    """Read by no step today (a notify step waits its own `timeout` param); kept so that files that set it load."""
    public_url: str | None = setting(None, v.to_optional_url("public_url"), flat="public_url")
    """remediate's base URL as people reach it (e.g. https://remediate.example.com): notify.slack and notify.teams
    link to `{public_url}/ui/runs/<id>`, notify.webhook sends it as `run_url`, message templates read it as
    `run.link`. Unset: their messages carry no links."""
    sinks: tuple[v.Sink, ...] = setting((), v.to_sinks, flat="sinks")
    """Named notification destinations that `notify` steps name (`sink: oncall`), so that no playbook holds
    a URL: `{oncall: {type: webhook, url_file: /etc/remediate/sinks/oncall/url}}`; type webhook, slack or teams;
    `url` (stored and shown: no credentials) or `url_file` (a mounted Secret, read when the step runs), and for
    a webhook `headers_file`. Environment: REMEDIATE_SINKS as YAML or JSON text."""

    slack_signing_secret_file: Path | None = setting(None, v.to_optional_path, flat="slack_signing_secret_file")
    """File of the Slack app's signing secret (a mounted Secret), read at start. Set: `POST /slack/interactions`
    is served and notify.slack's Approve button approves in place (docs/slack.md); unset: it opens the run page."""
    slack_approvers: tuple[tuple[str, str], ...] = setting((), v.to_slack_approvers, flat="slack_approvers")
    """Who may approve from Slack: `{U123ABC: alice}`, Slack user id -> the name recorded as `slack:alice`."""

    def sink(self, name: str) -> v.Sink | None:
        """The sink named `name`; None when it is not configured."""
        return next((sink for sink in self.sinks if sink.name == name), None)

    def slack_signing_secret(self) -> str | None:
        """The Slack app's signing secret (read now); None when unset. ConfigError: unreadable or empty."""
        return v.secret_from(None, self.slack_signing_secret_file, "slack_signing_secret")

    def slack_approver(self, user_id: str) -> str | None:
        """The principal that Slack user `user_id` approves as (`slack:<name>`); None when not listed."""
        return next((f"slack:{name}" for user, name in self.slack_approvers if user == user_id), None)


@dataclass(frozen=True)
class GpuSettings:
    """GPUs (node-local gpu.* steps), wherever node steps run."""

    PREFIX: ClassVar[str] = "gpu_"
    backend: str = setting("nvml", v.one_of("nvml", "simulated"))
    """nvml (the real driver) or simulated (only ever chosen explicitly: its device file, YAML/JSON, below)."""
    simulator_file: Path | None = setting(None, v.to_optional_path)
    """Device file (YAML/JSON) of the simulated GPU backend."""
    power_floor_watts: float | None = setting(None, v.to_optional_watts)
    """Refuse to set a GPU's power limit below these watts (see power_floor_percent)."""
    power_floor_percent: float | None = setting(None, functools.partial(v.to_optional_watts, most=100))
    """Refuse to set a GPU's power limit below these watts / this % of its default limit (an agent's own limit)."""
    events_alertmanager_url: str | None = setting(None, v.to_optional_url("gpu_events_alertmanager_url"))
    """Agent: the AlertManager that GPU faults are raised in as alerts (see events_resolve_after)."""
    events_token_file: Path | None = setting(None, v.to_optional_path)
    """Agent: file of a bearer token for that AlertManager."""
    events_resolve_after: float = setting(1800.0, v.to_seconds)
    """Agent: raise GPU faults as alerts in this AlertManager (agent.gpu_faults; unset: off), resolved after."""
    health_poll_interval: float = setting(60.0, v.to_seconds)
    """Agent (with gpu_events_alertmanager_url): seconds between health reads for silent degradations; 0: off."""
    health_slowdown_polls: int = setting(3, functools.partial(v.to_positive_int, minimum=1))
    """Agent: GPUHwSlowdownPersistent fires after a HW slowdown on this many reads in a row (clears after as many)."""


@dataclass(frozen=True)
class DiskSettings:
    """Disk cleanup (node-local disk.* steps)."""

    cleanup_policies_file: Path | None = setting(None, v.to_optional_path)
    """YAML file of the node's cleanup policies (docs/cleanup-policies.example.yaml); read when first needed."""


@dataclass(frozen=True)
class TrainingSettings:
    """Training jobs (node-local steps: training.rollback, training.scale_lr, training.checkpoint)."""

    PREFIX: ClassVar[str] = "training_"
    control_root: Path = setting(Path("/run/remediate/training"), v.to_directory)
    """Control directory shared with training jobs (docs/training-protocol.md); never taken from a label."""
    job_labels: tuple[str, ...] = setting(
        ("training_job", "job", "job_name", "exported_job", "exported_pod", "pod"), v.to_label_names
    )
    """Alert labels that may name the training job; the first whose value is a registered job wins."""


@dataclass(frozen=True)
class AgentSettings:
    """The node agent (`remediate agent`), and where the server runs node-local steps."""

    PREFIX: ClassVar[str] = "agent_"
    node_name: str | None = setting(None, v.to_optional_str, flat="node_name")
    """This process's node. Server: node steps whose target is this node run in the server itself (leave
    unset in Kubernetes); without agents, the only target (with node_aliases) node steps run for (unset:
    the host name). Agent: the only target it accepts (and node_aliases); default there: the host name."""
    node_aliases: tuple[str, ...] = setting((), v.to_names, flat="node_aliases")
    """Agent, and a server without agents: other names alerts may give this node (e.g. its FQDN);
    comma-separated in the environment."""
    agents: tuple[tuple[str, str], ...] = setting((), v.to_agents, flat="agents")
    """Server: static map node -> agent URL (`agents: {node-a: http://10.0.0.5:9096}`; env `node-a=URL,...`)."""
    selector: str | None = setting(None, v.to_optional_str)
    """Server: label selector of the agent DaemonSet's pods; when set, agents are found through the Kubernetes API."""
    namespace: str | None = setting(None, v.to_optional_str)
    """Server: namespace of the agent pods (default: the server pod's own namespace)."""
    port: int = setting(9096, v.to_positive_int)
    """Server: port of agents found through the Kubernetes API."""
    daemonset: str | None = setting(None, v.to_optional_str)
    """Server: name of the agent DaemonSet; a discovered pod must be controlled by it (unset: by any DaemonSet)."""
    audience: str = setting("remediate-agent", v.to_audience)
    """Server, with agent_selector: the audience of the projected ServiceAccount token an agent pod presents to
    POST /v1/agent-credential (checked by TokenReview) to get its own node's credential."""
    service_account: str | None = setting(None, v.to_optional_str)
    """Server, with agent_selector: the agent pods' ServiceAccount; a token of another account gets no
    credential (unset: any account of agent_namespace)."""
    enroll_rate: int = setting(20, functools.partial(v.to_positive_int, minimum=1))
    """Server: TokenReviews per second POST /v1/agent-credential may cost the API server, all HTTP workers
    together (429 with Retry-After above it; each replica has its own). 10,000 agents enroll in ~500 s at 20."""
    token: str | None = setting(None, str, secret=True)
    """Bearer token between the server and its agents (both sides; or `agent_token_file`)."""
    token_file: Path | None = setting(None, v.to_optional_path)
    """File holding `agent_token` (a mounted Secret), read at start."""
    node_token: str | None = setting(None, str, secret=True)
    """Agent: this node's own credential, HMAC(agent_token, node_name) (`remediate agent-credential NODE`);
    with it the agent needs no `agent_token` and accepts only requests signed for its own node."""
    node_token_file: Path | None = setting(None, v.to_optional_path)
    """Agent: file holding `agent_node_token` (a mounted Secret), read at start."""
    retries: int = setting(3, v.to_positive_int)
    """Server: retries of one call to an agent that cannot be reached (connection refused, no agent pod yet)."""
    connect_timeout: float = setting(3.0, v.to_seconds)
    """Server: seconds to connect to an agent before the call counts as not reached (and is retried)."""
    bind: str = setting("127.0.0.1:9096", str)
    """Agent: host:port it listens on."""
    threads: int = setting(8, v.to_positive_int)
    """Agent: steps it runs at once (a further step waits for one to end; health checks and cancels never wait)."""
    state_file: Path = setting(Path("remediate-agent.db"), Path)
    """Agent: SQLite file of what node actions remember (e.g. the power limit a restore puts back)."""

    def resolved_token(self) -> str | None:
        return v.token_from(self.token, self.token_file, "agent_token")

    def resolved_node_token(self) -> str | None:
        return v.token_from(self.node_token, self.node_token_file, "agent_node_token")


@dataclass(frozen=True)
class BreakerSettings:
    """The circuit breaker of cluster actions (k8s.cordon, k8s.taint, k8s.drain, slurm.drain)."""

    PREFIX: ClassVar[str] = "breaker_"
    max_fraction: float = setting(0.10, v.to_fraction)
    """At most this share of the (selected) nodes held or changed within the window; on Slurm, of each partition too."""
    max_nodes: int = setting(3, v.to_positive_int)
    """... and at most this many. Cap = min(fraction x nodes, max_nodes), at least 1 when both are > 0."""
    window: float = setting(600.0, v.to_seconds)
    """Seconds over which changed nodes are counted."""
    node_selector: str | None = setting(None, v.to_optional_selector)
    """Label selector of the nodes the fraction is taken of (e.g. nvidia.com/gpu.present=true); unset: all."""
    stale_horizon: float = setting(900.0, v.to_seconds)
    """After a breaker reset, alerts that started before it and longer ago than this are recorded as stale."""


@dataclass(frozen=True)
class KubeSettings:
    """The Kubernetes API (k8s.* steps, agent discovery) and the breaker that caps cluster changes."""

    PREFIX: ClassVar[str] = "kube_"
    kubeconfig: Path | None = setting(None, v.to_optional_path, flat="kubeconfig")
    """kubeconfig file of the cluster; unset: the in-cluster service account inside a pod, else no cluster
    ($KUBECONFIG and ~/.kube/config are never read on their own: k8s.* steps fail saying to set this)."""
    context: str | None = setting(None, v.to_optional_str)
    """Context of the kubeconfig to use (default: its current context)."""
    request_timeout: float = setting(10.0, v.to_seconds)
    """Seconds one Kubernetes API request may take; longer counts as a transient error (retried)."""
    node_labels: tuple[str, ...] = setting(
        ("node", "kubernetes_node", "Hostname", "hostname", "instance"), v.to_label_names
    )
    """Alert labels that name the node of a k8s.* step, in order (instance loses its port)."""
    node_selector: str | None = setting(None, v.to_optional_selector)
    """Label selector of the nodes k8s.cordon/taint/drain may act on (e.g. nvidia.com/gpu.present=true);
    unset: breaker_node_selector; both unset: any node. Uncordon and untaint are never refused by it."""
    allow_control_plane: bool = setting(False, v.to_bool)
    """Let k8s.cordon/taint/drain act on control-plane nodes (label node-role.kubernetes.io/control-plane)."""
    breaker: BreakerSettings = field(default_factory=BreakerSettings)


@dataclass(frozen=True)
class SlurmSettings:
    """Slurm (slurm.* steps): which cluster, which of its nodes remediate may drain (docs/slurm.md)."""

    PREFIX: ClassVar[str] = "slurm_"
    conf: Path | None = setting(None, v.to_optional_path)
    """The cluster's slurm.conf, passed to scontrol/sinfo as SLURM_CONF; unset: no cluster (slurm.* steps fail
    saying to set it: neither /etc/slurm/slurm.conf nor $SLURM_CONF is read on its own)."""
    partitions: tuple[str, ...] = setting((), v.to_partitions)
    """Partitions whose nodes slurm.drain may drain, and the breaker's fraction counts (unset: every node)."""
    command_timeout: float = setting(30.0, v.to_command_timeout)
    """Seconds one scontrol/sinfo may take; longer counts as slurmctld not answering (the step is retried)."""
    bin_dir: Path | None = setting(None, v.to_optional_path)
    """Directory of scontrol and sinfo (unset: /usr/local/bin, /usr/bin, /bin)."""
    node_labels: tuple[str, ...] = setting(("node", "hostname", "Hostname", "instance"), v.to_label_names)
    """Alert labels that name the node of a slurm.* step, in order (instance loses its port)."""
    poll_interval: float = setting(15.0, v.to_slurm_poll_interval)
    """Seconds between two `sinfo --json` of the shared node cache (the breaker's counts), one per process
    whatever the number of steps; the cache's view is refused past 3 intervals (the step is retried)."""


@dataclass(frozen=True)
class PrometheusSettings:
    """The Prometheus that check.prometheus steps query, and what `remediate doctor` checks (docs/doctor.md)."""

    PREFIX: ClassVar[str] = "prometheus_"
    url: str | None = setting(None, v.to_optional_url("prometheus_url"))
    """Base URL of the Prometheus HTTP API that `check.prometheus` steps query (e.g. http://prometheus:9090);
    never taken from a label. Unset: such a step fails saying so."""
    bearer_token_file: Path | None = setting(None, v.to_optional_path)
    """File holding a bearer token for that Prometheus (e.g. a mounted Secret), read at each query."""
    alertmanager_url: str | None = setting(None, v.to_optional_url("alertmanager_url"), flat="alertmanager_url")
    """Doctor: the AlertManager that sends to this server; its /api/v2/status config is checked (unset: not)."""
    rule_files: Path | None = setting(None, v.to_optional_path, flat="rule_files")
    """Doctor: a Prometheus rule file, or a directory of `*.rules.yml`, whose series and routes are checked."""


@dataclass(frozen=True)
class ReportSettings:
    """The reliability report (docs/report.md) on /metrics."""

    PREFIX: ClassVar[str] = "report_"
    window: float = setting(7 * 86400.0, v.to_seconds)
    """The window of the reliability figures on /metrics (`remediate_report_*`): the last 7 days by default.
    0: none on /metrics (which needs no token; the figures name nodes and jobs). GET /report is unaffected."""
    cache: float = setting(60.0, v.to_seconds)
    """Seconds a process reuses the reliability figures it computed for /metrics before reading the store again."""
    job_labels: tuple[str, ...] = setting(("training_job", "job"), v.to_label_names)
    """Alert labels naming an incident's training job in the report and /metrics, in order (the first wins)."""


@dataclass(frozen=True)
class GrafanaSettings:
    """Grafana annotations of executed runs (docs/grafana.md)."""

    PREFIX: ClassVar[str] = "grafana_"
    url: str | None = setting(None, v.to_optional_url("grafana_url"))
    """Base URL of a Grafana (http/https): each executed run (succeeded or failed) is posted to its
    /api/annotations. Unset: no annotations."""
    token_file: Path | None = setting(None, v.to_optional_path)
    """File holding a Grafana service-account token (read once at start, never logged)."""

    def resolved_token(self) -> str | None:
        return v.secret_from(None, self.token_file, "grafana_token")


@dataclass(frozen=True)
class UiSettings:
    """The web pages under /ui/ (docs/ui.md)."""

    PREFIX: ClassVar[str] = "ui_"
    enabled: bool = setting(True, v.to_bool, flat="ui")
    """Serve the web pages under /ui/ (history, run pages, pause/breaker/approvals); false: /ui/* is 404."""
    secret_file: Path | None = setting(None, v.to_optional_path)
    """File of the key that signs the pages' session cookies (shared by every worker and replica). Unset:
    derived from the configured tokens, so changing a token ends every session."""
    cookie_secure: str = setting("auto", v.one_of("auto", "always", fold=True))
    """The session cookie's `Secure` flag. auto: when the page was asked for over https as the server sees
    it; always: on every cookie, for a server behind a proxy that terminates TLS and forwards plain http."""


@dataclass(frozen=True)
class LogSettings:
    """The log lines of `serve` and `agent` (docs/logging.md)."""

    PREFIX: ClassVar[str] = "log_"
    format: str = setting("text", v.one_of("text", "json", fold=True))
    """text: one line per record, `time LEVEL logger: message key=value...`; json: one JSON object per line
    (the chart's default), for Loki, Elasticsearch, `kubectl logs | jq`."""
    level: str = setting("info", v.one_of("debug", "info", "warning", "error", fold=True))
    """The least severe level logged: debug, info, warning or error (e.g. warning: refusals and failures only)."""


@dataclass(frozen=True)
class Settings:
    """Everything the server, the executor and the CLI need to know, one section per concern."""

    server: ServerSettings = field(default_factory=ServerSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    gpu: GpuSettings = field(default_factory=GpuSettings)
    disk: DiskSettings = field(default_factory=DiskSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    burnin: BurninSettings = field(default_factory=BurninSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    grafana: GrafanaSettings = field(default_factory=GrafanaSettings)
    ui: UiSettings = field(default_factory=UiSettings)
    log: LogSettings = field(default_factory=LogSettings)

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """Settings from flat names and values already of their type (what a test or the loader holds):
        `Settings.of(kube_context="prod")` is `Settings(kube=KubeSettings(context="prod"))`."""
        unknown = sorted(set(values) - set(FLAT))
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(unknown)}")
        return _build(cls, values)


def flat_name(cls: type, each: dataclasses.Field[Any]) -> str:
    return each.metadata["flat"] or getattr(cls, "PREFIX", "") + each.name


def setting_fields(cls: type) -> Iterator[tuple[type, dataclasses.Field[Any]]]:
    """(section, field) of every setting of `cls` and of its sections."""
    for each in dataclasses.fields(cls):
        yield from [(cls, each)] if "convert" in each.metadata else setting_fields(each.default_factory)  # type: ignore[arg-type]


def _build(cls: type, values: Mapping[str, Any]) -> Any:
    """`cls` from flat values: each of its settings given in `values`, each of its sections built alike."""
    kwargs = {}
    for each in dataclasses.fields(cls):
        if "convert" not in each.metadata:
            kwargs[each.name] = _build(each.default_factory, values)  # type: ignore[arg-type]
        elif (flat := flat_name(cls, each)) in values:
            kwargs[each.name] = values[flat]
    return cls(**kwargs)


FLAT: dict[str, Callable[[Any], Any]] = {
    flat_name(cls, each): each.metadata["convert"] for cls, each in setting_fields(Settings)
}
"""The converter of every setting, by the name users write."""


def check_server_credentials(auth: AuthSettings) -> list[Credential]:
    """The server's tokens; ConfigError when none may do more than read (unless insecure_no_auth)."""
    credentials = auth.credentials()
    if not any(c.roles - {READ} for c in credentials) and not auth.insecure_no_auth:
        raise ConfigError(
            "no token configured: set REMEDIATE_WEBHOOK_TOKEN and REMEDIATE_OPERATOR_TOKEN (or REMEDIATE_TOKEN, "
            "--token-file, tokens_file; or, for local experiments only, --insecure-no-auth)"
        )
    return credentials


_ALIASES = {"stale_after": "lease"}
"""Old names of settings, still read (file, environment, flags) as the new one."""


def _convert(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    unknown = [key for key in values if _canonical(str(key)) not in FLAT]
    if unknown:
        known = ", ".join(sorted(FLAT))
        names = ", ".join(repr(key) for key in unknown)
        raise ConfigError(f"{source}: unknown setting{'s' if len(unknown) > 1 else ''} {names} (known: {known})")
    converted: dict[str, Any] = {}
    for key, raw in values.items():
        name = _canonical(key)
        if name in converted:  # `lease` and its old name `stale_after` both: which one was meant?
            raise ConfigError(f"{source}: setting {key!r} is given twice (also as {name!r}): keep one")
        try:
            converted[name] = FLAT[name](raw)
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
    if "config" in data:
        raise ConfigError(f"config file {path}: setting 'config' names the settings file; it cannot be set in one")
    return _convert(data, f"config file {path}")


def settings_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values = {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in env.items()
        if key.startswith(ENV_PREFIX) and _canonical(key[len(ENV_PREFIX) :].lower()) in FLAT
    }
    return _convert(values, "environment")


def check_schedulers(settings: Settings) -> None:
    """A scheduler named in `schedulers` must have its connection configured: refused at start, not at the first
    alert. (Kubernetes is not checked: it is the default, and a server without a cluster sends its node steps
    nowhere but still judges, records and notifies, as before the setting existed.)"""
    if Scheduler.SLURM in settings.engine.schedulers and settings.slurm.conf is None:
        raise ConfigError(
            "schedulers names slurm but slurm_conf is not set: set it (REMEDIATE_SLURM_CONF) to the cluster's "
            "slurm.conf, or leave slurm out of schedulers"
        )


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
    # The file read, whichever of --config and REMEDIATE_CONFIG named it.
    merged["config"] = None if config_file is None else Path(config_file)
    return Settings.of(**merged)
