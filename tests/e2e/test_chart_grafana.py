"""The chart's Grafana dashboard (grafana.dashboards): a ConfigMap the Grafana sidecar of
kube-prometheus-stack loads, holding the exact dashboard JSON; nothing when it is off (the default)."""

from __future__ import annotations

import json

from tests.support.dashboard import CHART_DASHBOARD, DASHBOARD
from tests.support.helm import NAMESPACE, RELEASE, Helm, by_kind

NAME = f"{RELEASE}-remediate-dashboard"


def dashboards(helm: Helm, values: dict[str, object] | None = None) -> list[dict[str, object]]:
    return [o for o in helm.objects(values) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == NAME]


def test_the_dashboard_is_off_by_default(helm: Helm) -> None:
    assert dashboards(helm) == []
    assert dashboards(helm, {"grafana": {"dashboards": {"enabled": False}}}) == []


def test_enabled_it_is_a_configmap_with_the_sidecars_label_and_the_exact_json(helm: Helm) -> None:
    objects = helm.objects({"grafana": {"dashboards": {"enabled": True}}})

    configmap = by_kind(objects, "ConfigMap", NAME)
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert "annotations" not in configmap["metadata"]
    assert list(configmap["data"]) == ["remediate.json"]
    assert configmap["data"]["remediate.json"] == CHART_DASHBOARD.read_text(encoding="utf-8")
    assert CHART_DASHBOARD.read_bytes() == DASHBOARD.read_bytes(), "run scripts/sync-generated"
    assert json.loads(configmap["data"]["remediate.json"])["uid"] == "remediate"


def test_its_label_namespace_folder_and_annotations_are_configurable(helm: Helm) -> None:
    values = {
        "grafana": {
            "dashboards": {
                "enabled": True,
                "label": "grafana.example/dashboard",
                "labelValue": "remediate",
                "namespace": "monitoring",
                "folder": "GPU fleet",
                "additionalLabels": {"release": "kps"},
                "annotations": {"owner": "gpu-ops"},
            }
        }
    }

    (configmap,) = dashboards(helm, values)

    metadata = configmap["metadata"]
    assert metadata["namespace"] == "monitoring"
    assert metadata["labels"]["grafana.example/dashboard"] == "remediate"
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["labels"]["release"] == "kps"
    assert metadata["annotations"] == {"grafana_folder": "GPU fleet", "owner": "gpu-ops"}
    result = helm.lint(values)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_unknown_key_is_refused_by_the_values_schema(helm: Helm) -> None:
    result = helm.template({"grafana": {"dashboards": {"enabeld": True}}}, check=False)

    assert result.returncode != 0
    assert "enabeld" in result.stderr
