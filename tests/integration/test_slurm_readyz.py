"""/readyz and /metrics of one process (no executor process: its own cache's status) show the Slurm node cache
once a step read it, against the real slurmctld (tests/support/slurm.py): `slurm_cache` with its age, bound,
nodes and reads, `remediate_slurm_cache_age_seconds` and the commands sent, `remediate_slurm_commands_total`."""

from __future__ import annotations

from pathlib import Path

from remediate.config.schedulers import Scheduler
from remediate.config.settings import Settings
from remediate.server import build_services, create_app
from tests.support.slurm import SlurmCluster


def test_readyz_and_metrics_show_the_slurm_cache_once_a_step_read_it(slurm: SlurmCluster, tmp_path: Path) -> None:
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    settings = Settings.of(
        token="w-token-0123456789ab",
        playbooks=playbooks,
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        schedulers=(Scheduler.SLURM,),
        slurm_conf=slurm.conf,
        slurm_poll_interval=3600.0,
    )
    services = build_services(settings)
    app = create_app(settings, services=services).test_client()
    assert services.slurm is not None
    try:
        assert "slurm_cache" not in app.get("/readyz").get_json()  # nothing read it: nothing is polled
        # Every slurm.* action shares the process's one cache (one sinfo per interval) and its one client.
        assert {services.engine.registry.get(name).cache for name in ("slurm.drain", "slurm.resume")} == {  # type: ignore[attr-defined]
            services.slurm
        }
        services.slurm.census()
        shown = app.get("/readyz").get_json()["slurm_cache"]
        metrics = app.get("/metrics").get_data(as_text=True)
    finally:
        services.slurm.stop()
        services.store.close()

    assert (shown["fresh"], shown["nodes"], shown["reads"]) == (True, len(slurm.nodes), 1)
    assert (shown["max_staleness_s"], shown["interval_s"]) == (3 * 3600.0, 3600.0)
    assert 0 <= shown["age_s"] < 3600
    assert "remediate_slurm_cache_age_seconds " in metrics
    assert "remediate_slurm_cache_max_staleness_seconds 10800.0" in metrics
    assert 'remediate_slurm_commands_total{tool="sinfo"} 1.0' in metrics
