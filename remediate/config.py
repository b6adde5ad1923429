"""Settings: one typed object, built once from defaults, a YAML file, the environment and CLI flags.

Precedence, lowest to highest: built-in defaults < config file (``--config`` or
``REMEDIATE_CONFIG``) < ``REMEDIATE_*`` environment variables < command-line flags.
The CLI builds a `Settings` and passes it down; nothing reads the environment later.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remediate.durations import parse_duration
from remediate.errors import ConfigError

ENV_PREFIX = "REMEDIATE_"
SERVER_MODES = ("enforce", "dry-run")
GPU_BACKENDS = ("nvml", "simulated")


@dataclass(frozen=True)
class Settings:
    """Everything the server, the executor and the CLI need to know, grouped by concern."""

    # --- HTTP server
    bind: str = "127.0.0.1:9095"
    """host:port gunicorn listens on."""
    workers: int = 2
    """gunicorn worker processes; each also runs `executor_threads` executor threads."""
    threads: int = 1
    """gunicorn threads per worker (1 = the sync worker)."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Largest webhook body accepted (413 above). A 10,000-alert notification is about 6 MiB."""

    # --- auth
    token: str | None = field(default=None, repr=False)
    """Bearer token for /webhook and every mutating endpoint (or `token_file`)."""
    token_file: Path | None = None
    read_token: str | None = field(default=None, repr=False)
    """Optional second token that may only read /history and /runs."""
    read_token_file: Path | None = None
    insecure_no_auth: bool = False
    """Serve without any token. Only for local experiments; logged loudly."""

    # --- playbooks and store
    playbooks: Path = Path("playbooks")
    database_url: str = "sqlite:///remediate.db"
    mode: str = "enforce"
    """enforce: playbook modes apply. dry-run (shadow mode): every run only plans."""

    # --- executor
    executor_threads: int = 2
    poll_interval: float = 0.2
    """Seconds an idle executor waits before looking for runs queued by another process."""
    step_timeout: float = 300.0
    """Default per-step timeout in seconds (a step may set its own `timeout`)."""
    stale_after: float = 60.0
    """A running run whose executor has not sent a heartbeat for this long is recovered."""

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


    def resolved_token(self) -> str | None:
        return _secret(self.token, self.token_file, "token")

    def resolved_read_token(self) -> str | None:
        return _secret(self.read_token, self.read_token_file, "read_token")


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


def _to_seconds(value: Any) -> float:
    # Numbers go through parse_duration too, which refuses negative, infinite and NaN values.
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    return parse_duration(str(value)).total_seconds()


def _to_mode(value: Any) -> str:
    text = str(value)
    if text not in SERVER_MODES:
        raise ValueError(f"must be one of {', '.join(SERVER_MODES)}")
    return text


def _to_gpu_backend(value: Any) -> str:
    text = str(value)
    if text not in GPU_BACKENDS:
        raise ValueError(f"must be one of {', '.join(GPU_BACKENDS)}")
    return text


def _to_optional_path(value: Any) -> Path | None:
    return Path(value) if value not in (None, "") else None


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "bind": str,
    "workers": _to_positive_int,
    "threads": _to_positive_int,
    "max_body_bytes": _to_positive_int,
    "token": str,
    "token_file": _to_optional_path,
    "read_token": str,
    "read_token_file": _to_optional_path,
    "insecure_no_auth": _to_bool,
    "playbooks": Path,
    "database_url": str,
    "mode": _to_mode,
    "executor_threads": _to_positive_int,
    "poll_interval": _to_seconds,
    "step_timeout": _to_seconds,
    "stale_after": _to_seconds,
    "notify_timeout": _to_seconds,
    "gpu_backend": _to_gpu_backend,
    "gpu_simulator_file": _to_optional_path,
    "cleanup_policies_file": _to_optional_path,
}
assert set(_CONVERTERS) == {f.name for f in dataclasses.fields(Settings)}


def _convert(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    unknown = [key for key in values if str(key).replace("-", "_") not in _CONVERTERS]
    if unknown:
        known = ", ".join(sorted(_CONVERTERS))
        names = ", ".join(repr(key) for key in unknown)
        raise ConfigError(f"{source}: unknown setting{'s' if len(unknown) > 1 else ''} {names} (known: {known})")
    converted: dict[str, Any] = {}
    for key, raw in values.items():
        name = key.replace("-", "_")
        try:
            converted[name] = _CONVERTERS[name](raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: setting {key!r}: {exc}") from exc
    return converted


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
        if key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX) :].lower() in _CONVERTERS
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
