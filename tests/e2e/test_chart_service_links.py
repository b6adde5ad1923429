"""The chart's pods get no Service-link environment variables (`enableServiceLinks: false`).

Kubernetes' default puts seven variables per Service of the namespace into every container (FOO_PORT,
FOO_SERVICE_HOST, ...): hundreds in a busy namespace. Nothing of remediate reads them (it finds the server
and the agents by DNS and the API), and every scan of the environment pays for them.
"""

from __future__ import annotations

from typing import Any

from tests.support.helm import Helm


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod the chart renders, by kind and name: workloads' templates and bare pods (helm test)."""
    specs = {}
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in {"Deployment", "DaemonSet", "StatefulSet", "Job"}:
            specs[name] = obj["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            specs[name] = obj["spec"]
    return specs


def test_every_pod_of_the_chart_turns_service_links_off(helm: Helm) -> None:
    specs = pod_specs(helm.objects({}))

    assert {name.split("/")[0] for name in specs} == {"Deployment", "DaemonSet", "Pod"}
    assert {name: spec.get("enableServiceLinks") for name, spec in specs.items()} == dict.fromkeys(specs, False)
