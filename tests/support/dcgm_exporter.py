"""What dcgm-exporter exports for one node's GPUs, scraped by a real Prometheus: the evidence the shipped XID
quarantine's proven-healthy step (check.prometheus) reads before a node is given back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.realsystems import MetricsEndpoint, Prometheus
from tests.support.waiting import scaled

TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"


def gpu_series(node: str, index: int, uuid: str) -> dict[str, str]:
    """The labels of one GPU's series, as dcgm-exporter before 4.8.3 names the node (`Hostname`)."""
    return {"Hostname": node, "gpu": str(index), "UUID": uuid}


@contextmanager
def exporting_gpus(workdir: Path, node: str, uuids: Sequence[str]) -> Iterator[tuple[MetricsEndpoint, Prometheus]]:
    """Each GPU of `uuids` (by index) reporting a temperature for `node`, scraped every second by a Prometheus
    in `workdir` that is scraping when this yields."""
    with (
        MetricsEndpoint() as metrics,
        # No rules, no alerts: an AlertManager address it never posts to.
        Prometheus(
            workdir, scrape_targets=[metrics.target], rule_files=[], alertmanager_url="http://127.0.0.1:9"
        ) as prom,
    ):
        for index, uuid in enumerate(uuids):
            metrics.set(TEMPERATURE, 55, gpu_series(node, index, uuid))
        prom.wait_until_scraping(timeout=scaled(30))
        yield metrics, prom
