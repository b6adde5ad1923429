"""The chart's `burnin` values: rendered into the server's burnin_* settings (read back by remediate's own
loader), the Job's namespace the release's unless set, and a value of the wrong form refused by the chart."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_chart_sinks import server_settings
from tests.support.helm import NAMESPACE, Helm


def test_by_default_no_burnin_is_configured_and_its_job_would_run_in_the_release_namespace(
    helm: Helm, tmp_path: Path
) -> None:
    burnin = server_settings(helm.objects(), tmp_path).burnin
    assert not burnin.configured and burnin.baselines == ()
    assert (burnin.tolerance, burnin.image, burnin.python, burnin.namespace) == (0.8, None, None, NAMESPACE)


def test_the_burnin_values_become_the_servers_burnin_settings(helm: Helm, tmp_path: Path) -> None:
    values = {
        "baselines": {"NVIDIA H100 80GB HBM3": 300, "NVIDIA A100-SXM4-80GB": 180.5},
        "tolerance": 0.7,
        "image": "registry.example/remediate-burnin:1.0",
        "python": "/opt/venv/bin/python",
        "namespace": "burnin-jobs",
    }
    burnin = server_settings(helm.objects({"burnin": values}), tmp_path).burnin
    assert burnin.baselines == (("NVIDIA A100-SXM4-80GB", 180.5), ("NVIDIA H100 80GB HBM3", 300.0))
    assert (burnin.tolerance, burnin.image, burnin.python, burnin.namespace) == (
        0.7, "registry.example/remediate-burnin:1.0", "/opt/venv/bin/python", "burnin-jobs"
    )  # fmt: skip
    assert burnin.defaults()["baselines"] == {"NVIDIA H100 80GB HBM3": 300.0, "NVIDIA A100-SXM4-80GB": 180.5}


def test_a_baseline_that_is_not_a_positive_number_and_a_relative_python_are_refused(helm: Helm) -> None:
    for wrong in ({"baselines": {"NVIDIA H100 80GB HBM3": 0}}, {"python": "python3"}, {"tolerance": 2}):
        refused = helm.template({"burnin": wrong}, check=False)
        assert refused.returncode != 0, wrong
        assert "burnin" in refused.stderr, refused.stderr
