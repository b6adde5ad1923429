"""The converters of setting values (file, environment and flags alike) and the reading of tokens: a ValueError
(or TypeError) is reported by the loader (remediate.config.settings) with the setting's name."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from remediate.config.durations import parse_duration
from remediate.config.rollout import Rollout, parse_node_waves, parse_rollout
from remediate.errors import ConfigError
from remediate.kube.model import parse_label_selector
from remediate.outbound.urls import check_stored_url
from remediate.slurm.names import check_partition_name

ENV_PREFIX = "REMEDIATE_"
WEBHOOK = "webhook"
OPERATOR = "operator"
READ = "read"
ROLES = (WEBHOOK, OPERATOR, READ)


def to_names(value: Any, what: str = "names (or a comma-separated string)") -> tuple[str, ...]:
    """A list, or a comma-separated string, of non-empty names."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError(f"must be a list of {what}")
    return tuple(str(item).strip() for item in items if str(item).strip())


def to_roles(value: Any) -> tuple[str, ...]:
    roles = to_names(value, f"roles ({', '.join(ROLES)})")
    bad = [role for role in roles if role not in ROLES]
    if bad or not roles:
        raise ValueError(f"must name roles among {', '.join(ROLES)}, got {value!r}")
    return roles


MIN_TOKEN_CHARS = 16
"""The shortest token accepted, wherever it is set (environment, file, tokens_file, agent tokens): a short
one is guessed through the API or the login page long before anything notices."""
MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one"


def token_from(value: str | None, path: Path | None, name: str) -> str | None:
    """A bearer token of setting `name` (or its file); ConfigError, naming where it came from, when short."""
    token = secret_from(value, path, name)
    if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
        where = f"{name} ({ENV_PREFIX}{name.upper()})" if value else f"{name}_file {path}"
        raise ConfigError(
            f"{where}: a token needs at least {MIN_TOKEN_CHARS} characters, not {len(token.strip())}; {MAKE_ONE}"
        )
    return token


def secret_from(value: str | None, path: Path | None, name: str) -> str | None:
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


@dataclass(frozen=True)
class Credential:
    """One accepted token: `name` is the principal recorded for what it does; operator implies read."""

    name: str
    token: str = field(repr=False)
    roles: frozenset[str]

    def allows(self, role: str) -> bool:
        return role in self.roles or (role == READ and OPERATOR in self.roles)


FIXED_PRINCIPALS = {"token": "token", WEBHOOK: "webhook_token", OPERATOR: "operator_token", READ: "read_token"}
"""The principal names of the single-token settings: no `tokens_file` entry may take one (in any case),
configured or not, so that a name in the history always means one credential."""


def read_tokens_file(path: Path) -> list[Credential]:
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
            role_set = frozenset(to_roles(roles))
        except ValueError as exc:
            raise ConfigError(f"{where}: roles {exc}") from None
        result.append(Credential(str(name), token.strip(), role_set))
    return result


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def to_positive_int(value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool):
        raise ValueError("not an integer")
    number = int(value)
    if number < minimum:
        raise ValueError(f"must be at least {minimum}" if minimum else "must not be negative")
    return number


def to_seconds(value: Any) -> float:
    # Numbers go through parse_duration too, which refuses negative, infinite and NaN values.
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    return parse_duration(str(value)).total_seconds()


MIN_LEASE_S = 2.0
"""The shortest lease accepted: heartbeats go every lease/4 but never more often than every 0.5 s,
so a shorter lease would leave an owner less than four heartbeats to renew it."""


def to_lease(value: Any) -> float:
    seconds = to_seconds(value)
    if seconds < MIN_LEASE_S:
        raise ValueError(
            f"a lease of {seconds:g}s is too short: at least {MIN_LEASE_S:g}s, so that an owner renews it "
            "several times over (a few times its heartbeat plus a slow database write)"
        )
    return seconds


MIN_WORKER_TIMEOUT_S = 2.0
"""The shortest worker_timeout accepted: an HTTP worker's loop tells its master it is alive about once a second."""


def to_worker_timeout(value: Any) -> float:
    seconds = to_seconds(value)
    if seconds < MIN_WORKER_TIMEOUT_S:
        raise ValueError(f"at least {MIN_WORKER_TIMEOUT_S:g}s: a worker's loop checks in about once a second")
    return seconds


def one_of(*choices: str, fold: bool = False) -> Callable[[Any], str]:
    """A converter to one of `choices` (`fold`: compared lower-cased and stripped)."""

    def convert(value: Any) -> str:
        text = str(value).strip().lower() if fold else str(value)
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {value!r}")
        return text

    return convert


MIN_RETENTION = 86400.0
"""max_attempts counts a target's runs of the last 24 h (judging.guards.ATTEMPT_WINDOW): keep at least those."""


def to_retention(value: Any) -> float:
    """A duration of at least 1d, or 0 / off (keep everything)."""
    if isinstance(value, str) and value.strip().lower() in ("off", "0", "never"):
        return 0.0
    seconds = to_seconds(value)
    if 0 < seconds < MIN_RETENTION:
        raise ValueError("must be at least 1d (max_attempts counts the runs of the last 24 h), or off")
    return seconds


# The image ships psycopg 3 only (the `postgres` extra); SQLAlchemy reads a bare `postgresql://` as
# psycopg2 and `postgres://` not at all, so a libpq URL straight from an operator's Secret would fail.
_LIBPQ_SCHEME = re.compile(r"^(postgresql|postgres)://")


def to_database_url(value: Any) -> str:
    return _LIBPQ_SCHEME.sub("postgresql+psycopg://", str(value), count=1)


def to_optional_path(value: Any) -> Path | None:
    return Path(value) if value not in (None, "") else None


def to_directory(value: Any) -> Path:
    if value in (None, "") or not str(value).strip():
        raise ValueError("must be a directory path")
    return Path(str(value))


def to_label_names(value: Any) -> tuple[str, ...]:
    names = to_names(value, "label names (or a comma-separated string)")
    if not names:
        raise ValueError("must name at least one label")
    bad = [name for name in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)]
    if bad:
        raise ValueError(f"not label names: {', '.join(bad)}")
    return names


def to_partitions(value: Any) -> tuple[str, ...]:
    """Slurm partition names (checked here, so a typo such as `train gpu` fails at start, not at the first drain)."""
    names = to_names(value, "partition names (or a comma-separated string)")
    bad = [problem for name in names if (problem := check_partition_name(name))]
    if bad:
        raise ValueError("; ".join(bad))
    return names


def to_command_timeout(value: Any) -> float:
    seconds = to_seconds(value)
    if seconds <= 0:
        raise ValueError("must be more than 0 seconds")
    return seconds


MIN_SLURM_POLL_S = 1.0
"""The shortest slurm_poll_interval accepted: one `sinfo --json` a second is already a busy slurmctld's load."""


def to_slurm_poll_interval(value: Any) -> float:
    seconds = to_seconds(value)
    if seconds < MIN_SLURM_POLL_S:
        raise ValueError(f"must be at least {MIN_SLURM_POLL_S:g} second (one sinfo --json per interval)")
    return seconds


def to_optional_str(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    return text or None


def to_optional_selector(value: Any) -> str | None:
    """A label selector string (checked here, so a typo fails at start, not at the first cordon)."""
    text = to_optional_str(value)
    if text is not None:
        parse_label_selector(text)  # SelectorError is a ValueError: reported with the setting's name
    return text


def to_audience(value: Any) -> str:
    text = to_optional_str(value)
    if text is None:
        raise ValueError("must be a non-empty string (the audience of the agents' projected token)")
    return text


def to_optional_url(name: str) -> Callable[[Any], str | None]:
    """A converter to an absolute http(s) URL without its trailing slash, or None; errors name setting `name`."""

    def convert(value: Any) -> str | None:
        text = to_optional_str(value)
        if text is None:
            return None
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{name} must be an absolute http:// or https:// URL, got {text!r}")
        return text.rstrip("/")

    return convert


def to_agents(value: Any) -> tuple[tuple[str, str], ...]:
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


def to_optional_watts(value: Any, most: float = float("inf")) -> float | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError("not a number")
    number = float(value)
    if not number > 0 or number == float("inf"):
        raise ValueError("must be a positive number")
    if number > most:
        raise ValueError(f"must be at most {most:g}")
    return number


def to_fraction(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("not a number")
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError("must be between 0 and 1 (0.1 = 10% of the nodes)")
    return number


SINK_TYPES = ("webhook", "slack", "teams")
"""The formats a named sink posts in: notify.webhook's JSON summary, notify.slack's or notify.teams' message."""
_SINK_FIELDS = ("type", "url", "url_file", "headers_file")
_SINK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class Sink:
    """A named notification destination (`sinks.<name>`), which `notify` steps name instead of a URL.

    The same rules as notify.webhook/slack/teams' own params: `url` is stored and shown (no credentials in
    it), `url_file` and `headers_file` are paths of files (a mounted Secret) read when the step runs."""

    name: str
    type: str
    url: str | None = None
    url_file: str | None = None
    headers_file: str | None = None
    """webhook only: YAML `Name: value` headers (Authorization: Bearer ...)."""


def mapping_of(value: Any, of_what: str) -> Mapping[Any, Any]:
    """A mapping as the config file gives it, or as YAML/JSON text (the environment); empty for none."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError(f"must be a YAML or JSON mapping {of_what}") from None
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping {of_what}")
    return value


def to_sinks(value: Any) -> tuple[Sink, ...]:
    """`{name: {type, url | url_file, headers_file}}` (config file), or that mapping as YAML/JSON text
    (environment: REMEDIATE_SINKS). Each error names the field: `sinks.<name>.<field>: ...`."""
    value = mapping_of(value, "of sink names to sinks ({oncall: {type: webhook, url_file: ...}})")
    return tuple(_sink(str(name), entry) for name, entry in sorted(value.items(), key=lambda item: str(item[0])))


def _sink(name: str, entry: Any) -> Sink:
    where = f"sinks.{name}"
    if not _SINK_NAME.fullmatch(name):
        raise ValueError(f"{where}: a sink's name is letters, digits, _.- (at most 63)")
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a mapping (type, and url or url_file)")
    for key, text in entry.items():
        if key not in _SINK_FIELDS:
            raise ValueError(f"{where}.{key}: unknown field (known: {', '.join(_SINK_FIELDS)})")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}.{key}: must be a non-empty string")
    kind = entry.get("type")
    if kind not in SINK_TYPES:
        raise ValueError(f"{where}.type: must be one of {', '.join(SINK_TYPES)}, got {kind!r}")
    if bool(entry.get("url")) == bool(entry.get("url_file")):
        raise ValueError(
            f"{where}.url: give exactly one of url and url_file (a file such as a mounted Secret, for a URL "
            "that carries a credential)"
        )
    problem = check_stored_url(entry["url"].strip()) if entry.get("url") else None
    if problem:
        raise ValueError(f"{where}.url: {problem}")
    for key in ("url_file", "headers_file"):
        if entry.get(key) and not entry[key].strip().startswith("/"):
            raise ValueError(f"{where}.{key}: must be the absolute path of a file (e.g. a mounted Secret)")
    if entry.get("headers_file") and kind != "webhook":
        raise ValueError(f"{where}.headers_file: only a webhook sink sends headers of its own")
    return Sink(
        name,
        kind,
        **{key: entry[key].strip() for key in ("url", "url_file", "headers_file") if entry.get(key)},
    )


_SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]{2,20}")
_PRINCIPAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}")


def to_slack_approvers(value: Any) -> tuple[tuple[str, str], ...]:
    """`{U123ABC: alice}`: the Slack user ids who may approve from Slack, each with the principal name recorded
    (as `slack:<name>`); a mapping (config file) or that mapping as YAML/JSON text (environment). Each error
    names the entry: `slack_approvers.<id>: ...`."""
    value = mapping_of(value, "of Slack user ids to principal names ({U123ABC: alice})")
    approvers = []
    for user, name in sorted(value.items(), key=lambda item: str(item[0])):
        if not _SLACK_USER_ID.fullmatch(str(user)):
            raise ValueError(f"slack_approvers.{str(user)[:40]}: not a Slack user id (U or W, then capitals/digits)")
        if not isinstance(name, str) or not _PRINCIPAL_NAME.fullmatch(name):
            raise ValueError(f"slack_approvers.{user}: the name must be letters, digits, _.@- (at most 63)")
        approvers.append((str(user), name))
    return tuple(approvers)


def to_rollout(value: Any) -> Rollout | None:
    """`{label: remediate.io/wave, waves: {"1": enforce}, default: dry-run}` or `{slurm: feature, waves: ...}`
    (config file), or that mapping as YAML/JSON text (environment); none for empty. Each error names its field
    (`rollout.waves.1: ...`)."""
    return parse_rollout(mapping_of(value, "(label or slurm, waves, default)") or None)


def to_rollout_nodes(value: Any) -> tuple[tuple[str, str], ...]:
    """`{host-a: "1"}`: the wave of each node without Kubernetes; a mapping or that mapping as YAML/JSON text."""
    return parse_node_waves(mapping_of(value, 'of node names to waves ({host-a: "1"})'))
