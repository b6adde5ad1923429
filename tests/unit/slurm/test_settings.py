"""The `slurm` settings section: its flat names, its checks, and the actions the registry builds from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.actions import default_registry
from remediate.config.settings import ConfigError, Settings, load_settings


def test_the_slurm_settings_from_the_environment() -> None:
    env = {
        "REMEDIATE_SLURM_CONF": "/etc/slurm/slurm.conf",
        "REMEDIATE_SLURM_PARTITIONS": "train, gpu_long",
        "REMEDIATE_SLURM_COMMAND_TIMEOUT": "5s",
        "REMEDIATE_SLURM_BIN_DIR": "/opt/slurm/bin",
        "REMEDIATE_SLURM_POLL_INTERVAL": "1m",
    }
    slurm = load_settings(env=env).slurm
    assert slurm.conf == Path("/etc/slurm/slurm.conf") and slurm.bin_dir == Path("/opt/slurm/bin")
    assert slurm.partitions == ("train", "gpu_long") and slurm.command_timeout == 5.0
    assert slurm.poll_interval == 60.0
    defaults = Settings().slurm
    assert defaults.poll_interval == 15.0
    assert defaults.conf is None and defaults.partitions == () and defaults.node_labels[0] == "node"


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("SLURM_PARTITIONS", "train debug", "not a partition name"),
        ("SLURM_COMMAND_TIMEOUT", "0", "more than 0"),
        ("SLURM_POLL_INTERVAL", "0.5s", "at least 1 second"),
        ("SLURM_POLL_INTERVAL", "-5s", ""),
    ],
)
def test_a_bad_slurm_setting_fails_at_start_naming_it(name: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"setting '{name.lower()}': .*{problem}"):
        load_settings(env={f"REMEDIATE_{name}": value})


def test_the_registry_builds_the_slurm_actions_on_one_cache_and_client_of_the_settings() -> None:
    settings = Settings.of(
        slurm_conf=Path("/etc/slurm/slurm.conf"), slurm_partitions=("train",), slurm_poll_interval=30.0
    )
    registry = default_registry(settings)
    drain, resume = registry.get("slurm.drain"), registry.get("slurm.resume")
    assert drain.cache is resume.cache and drain.cache.interval == 30.0  # type: ignore[attr-defined]
    assert drain.cache.max_staleness == 90.0 and not drain.cache.status().started  # type: ignore[attr-defined]
    assert drain.client is resume.client and drain.client.conf == Path("/etc/slurm/slurm.conf")  # type: ignore[attr-defined]
    assert drain.options.partitions == ("train",)  # type: ignore[attr-defined]
    assert drain.breaker_gated and not resume.breaker_gated and drain.idempotent and resume.idempotent
