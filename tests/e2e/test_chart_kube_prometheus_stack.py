"""helm/remediate/examples/values-kube-prometheus-stack.yaml holds only the values a
kube-prometheus-stack + dcgm-exporter cluster must choose (it took 9-11 values and 4 steps outside the chart),
and, rendered with helm as docs/install.md installs it, wires remediate into kube-prometheus-stack: the
ServiceMonitor and the PrometheusRule carry its release label, the rules are the shipped ones, the settings
name its Prometheus and the public URL, and the AlertmanagerConfig reads the webhook token from a Secret in
its own namespace. `kubePrometheusStack.release` does that without changing what existing values render."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from remediate.config.settings import Settings, read_config_file
from tests.support.helm import CHART, Helm, by_kind

ROOT = CHART.parents[1]
EXAMPLE = CHART / "examples" / "values-kube-prometheus-stack.yaml"
INSTALL = ROOT / "docs" / "install.md"
# As docs/install.md installs it: `helm install remediate helm/remediate -n remediate -f <example>`.
RELEASE = NAMESPACE = "remediate"
CRDS = {"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}


def example() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return values


def leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of every value a values file sets (what a user has to choose)."""
    found: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        found += leaves(value, f"{path}.") if isinstance(value, dict) and value else [path]
    return sorted(found)


def merged(defaults: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of a values file over the chart's values.yaml (maps merge, anything else replaces)."""
    out = dict(defaults)
    for key, value in override.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def render(helm: Helm, *args: str) -> list[dict[str, Any]]:
    text = helm.run("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def server_settings(objects: list[dict[str, Any]], tmp_path: Path) -> tuple[dict[str, Any], Settings]:
    text = by_kind(objects, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return yaml.safe_load(text), Settings.of(**read_config_file(path))


@pytest.fixture(scope="module")
def objects(helm: Helm) -> list[dict[str, Any]]:
    return render(helm, "-f", str(EXAMPLE))


# --------------------------------------------------------------------------- the example


def test_the_example_sets_only_the_values_a_team_chooses() -> None:
    assert leaves(example()) == [
        "alertmanagerConfig.enabled",
        "image.repository",
        "kubePrometheusStack.release",
        "prometheusRule.exclude",
        "server.config.public_url",
        "sinks.breakfix.existingSecret",
        "sinks.breakfix.type",
        "sinks.oncall.existingSecret",
        "sinks.oncall.type",
    ]


def test_the_example_passes_the_values_schema_and_helm_lint(helm: Helm) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(merged(defaults, example()))
    lint = helm.run("lint", "--strict", "--namespace", NAMESPACE, str(CHART), "-f", str(EXAMPLE), check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_every_object_it_renders_is_valid_and_in_the_release_namespace(objects: list[dict[str, Any]]) -> None:
    assert {o["kind"] for o in objects} >= CRDS
    for obj in objects:
        if obj["kind"] in CRDS:
            assert obj["apiVersion"].startswith("monitoring.coreos.com/"), obj["metadata"]["name"]
        else:
            kubernetes_validate.validate(obj, "1.30.0", strict=True)
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


def test_its_servicemonitor_and_prometheusrule_carry_the_release_label_and_the_shipped_rules_but_disk(
    objects: list[dict[str, Any]],
) -> None:
    """kube-prometheus-stack's own rules raise NodeFilesystemAlmostOutOfSpace already (docs/install.md: load one
    set of disk rules): the example leaves the shipped disk rules out, and only them."""
    release = example()["kubePrometheusStack"]["release"]
    monitor = by_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == release
    assert monitor["spec"]["selector"]["matchLabels"] == by_kind(objects, "Service")["spec"]["selector"]
    rule = by_kind(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == release
    shipped = [
        group
        for path in sorted((ROOT / "alertmanager" / "rules").glob("*.rules.yml"))
        if path.name != "disk.rules.yml"
        for group in yaml.safe_load(path.read_text())["groups"]
    ]
    # The self-alerts' runbooks are the server's own page at the example's public_url (tests/e2e/test_runbooks.py).
    public_url = example()["server"]["config"]["public_url"]
    for group in shipped:
        for shipped_rule in group["rules"]:
            annotations = shipped_rule.get("annotations", {})
            if "runbook_url" in annotations:
                annotations["runbook_url"] = f"{public_url}/runbooks#{shipped_rule['alert'].lower()}"
    assert rule["spec"]["groups"] == shipped
    alerts = {r.get("alert") for group in rule["spec"]["groups"] for r in group["rules"]}
    assert "NodeFilesystemAlmostOutOfSpace" not in alerts
    dashboard = by_kind(objects, "ConfigMap", f"{RELEASE}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # kube-prometheus-stack's sidecar label


def test_its_settings_name_kube_prometheus_stacks_prometheus_and_the_public_url_in_shadow_mode(
    objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    _, settings = server_settings(objects, tmp_path)
    # The Service the Prometheus Operator keeps for every Prometheus, in kube-prometheus-stack's namespace.
    assert settings.prometheus.url == "http://prometheus-operated.monitoring.svc:9090"
    assert settings.notify.public_url == example()["server"]["config"]["public_url"]
    assert settings.engine.mode == "dry-run"
    # The shipped playbooks' sink, its URL a file from the team's Secret, mounted where the setting reads it.
    oncall = settings.notify.sink("oncall")
    assert oncall is not None and oncall.type == "slack"
    assert str(oncall.url_file) == "/etc/remediate/sinks/oncall/url"
    # gpu-xid-quarantine's last rung hands the node to `breakfix` (k8s.handoff): without it rung 3 fails.
    breakfix = settings.notify.sink("breakfix")
    assert breakfix is not None and breakfix.type == "webhook"
    assert str(breakfix.url_file) == "/etc/remediate/sinks/breakfix/url"
    server = by_kind(objects, "Deployment", RELEASE)["spec"]["template"]["spec"]
    secrets = {vol["secret"]["secretName"] for vol in server["volumes"] if "secret" in vol}
    assert {"oncall-slack", "breakfix-webhook"} <= secrets


def test_every_sink_a_shipped_playbook_names_is_configured(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    _, settings = server_settings(objects, tmp_path)
    playbooks = by_kind(objects, "ConfigMap", f"{RELEASE}-playbooks")["data"]
    named = {name for text in playbooks.values() for name in re.findall(r"^\s*sink: ([\w-]+)", text, re.M)}
    assert named >= {"oncall", "breakfix"}
    assert [name for name in sorted(named) if settings.notify.sink(name) is None] == []


def test_its_alertmanagerconfig_reads_the_token_from_a_secret_in_its_own_namespace(
    objects: list[dict[str, Any]],
) -> None:
    """The operator resolves an AlertmanagerConfig's Secret references in the AlertmanagerConfig's namespace:
    the chart's tokens Secret is there, so nothing has to be copied into kube-prometheus-stack's namespace."""
    config = by_kind(objects, "AlertmanagerConfig")
    (receiver,) = config["spec"]["receivers"]
    (webhook,) = receiver["webhookConfigs"]
    assert webhook["url"] == f"http://{RELEASE}.{NAMESPACE}.svc:9095/webhook"
    assert webhook["sendResolved"] is True
    credentials = webhook["httpConfig"]["authorization"]["credentials"]
    secret = by_kind(objects, "Secret", credentials["name"])
    assert secret["metadata"]["namespace"] == config["metadata"]["namespace"] == NAMESPACE
    assert credentials["key"] == "token" and credentials["key"] in secret["data"]
    playbooks = by_kind(objects, "ConfigMap", f"{RELEASE}-playbooks")["data"]
    wanted: set[str] = set()
    for text in playbooks.values():
        alertname = yaml.safe_load(text)["match"]["alertname"]
        wanted.update([alertname] if isinstance(alertname, str) else alertname)
    (matcher,) = config["spec"]["route"]["matchers"]
    assert set(matcher["value"].split("|")) == wanted


def test_its_network_policy_admits_kube_prometheus_stacks_alertmanager_and_prometheus(
    objects: list[dict[str, Any]],
) -> None:
    policy = by_kind(objects, "NetworkPolicy", RELEASE)
    peers = policy["spec"]["ingress"][0]["from"]
    namespace = {"kubernetes.io/metadata.name": "monitoring"}
    for name in ("alertmanager", "prometheus"):
        assert {
            "namespaceSelector": {"matchLabels": namespace},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
        } in peers


# --------------------------------------------------------------------------- kubePrometheusStack.release


def test_without_the_release_nothing_kube_prometheus_stack_consumes_is_rendered(helm: Helm, tmp_path: Path) -> None:
    objects = helm.objects()
    assert not [o for o in objects if o["kind"] in CRDS]
    assert not [o for o in objects if o["metadata"]["name"].endswith("-dashboard")]
    config = yaml.safe_load(by_kind(objects, "ConfigMap", "rel-remediate-config")["data"]["config.yaml"])
    assert "prometheus_url" not in config


def test_each_objects_own_values_still_win_over_the_release(helm: Helm, tmp_path: Path) -> None:
    objects = helm.objects(
        {
            "kubePrometheusStack": {"release": "kps", "namespace": "observability"},
            "serviceMonitor": {"enabled": False},
            "prometheusRule": {"additionalLabels": {"release": "other", "team": "gpu"}},
            "grafana": {"dashboards": {"enabled": False}},
        }
    )
    assert not [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert not [o for o in objects if o["metadata"]["name"].endswith("-dashboard")]
    labels = by_kind(objects, "PrometheusRule")["metadata"]["labels"]
    assert (labels["release"], labels["team"]) == ("other", "gpu")
    config = yaml.safe_load(by_kind(objects, "ConfigMap", "rel-remediate-config")["data"]["config.yaml"])
    assert config["prometheus_url"] == "http://prometheus-operated.observability.svc:9090"

    given = helm.objects(
        {"kubePrometheusStack": {"release": "kps"}, "server": {"config": {"prometheus_url": "http://thanos:9090"}}}
    )
    config = yaml.safe_load(by_kind(given, "ConfigMap", "rel-remediate-config")["data"]["config.yaml"])
    assert config["prometheus_url"] == "http://thanos:9090"


def test_a_release_name_that_is_no_label_value_is_refused_naming_the_value(helm: Helm) -> None:
    result = helm.template({"kubePrometheusStack": {"release": "Kube Prometheus"}}, check=False)
    assert result.returncode != 0
    assert "kubePrometheusStack" in result.stderr and "release" in result.stderr


# --------------------------------------------------------------------------- docs/install.md


def walkthrough() -> str:
    text = INSTALL.read_text(encoding="utf-8")
    match = re.search(r"^### kube-prometheus-stack, step by step\n(.*?)(?=^##)", text, re.M | re.S)
    assert match, "docs/install.md has no section 'kube-prometheus-stack, step by step'"
    return match.group(1)


def yaml_blocks(section: str) -> list[Any]:
    return [
        yaml.safe_load(textwrap.dedent(b)) for b in re.findall(r"^[ ]*```yaml\n(.*?)^[ ]*```", section, re.S | re.M)
    ]


def test_the_install_page_walks_the_example_with_the_secret_and_the_kube_prometheus_stack_setting() -> None:
    section = walkthrough()
    assert "helm/remediate/examples/values-kube-prometheus-stack.yaml" in section
    for path in leaves(example()):
        assert f"`{path}" in section, f"the walkthrough does not explain {path}"
    # The one setting on kube-prometheus-stack's side, as a values block that kube-prometheus-stack reads.
    blocks = yaml_blocks(section)
    strategies = [
        b["alertmanager"]["alertmanagerSpec"]["alertmanagerConfigMatcherStrategy"]
        for b in blocks
        if isinstance(b, dict) and "alertmanager" in b
    ]
    assert strategies == [{"type": "None"}]
    # The Secret the AlertmanagerConfig reads: the chart's, in the release namespace, key token.
    assert f"{RELEASE}-tokens" in section and "key `token`" in section


def test_the_install_page_says_how_dcgm_exporters_node_label_becomes_the_node_name() -> None:
    """dcgm-exporter (3.1.6 and later) writes NODE_NAME into `Hostname` where its pod sets it (its chart and the
    GPU operator do, from spec.nodeName); otherwise `Hostname` is the pod's name and a relabelling to `node`
    fixes it. `node` is the label `target: node` reads first, so every shipped rule on dcgm-exporter's GPU and XID
    metrics must keep it."""
    section = walkthrough()
    assert "NODE_NAME" in section and "spec.nodeName" in section
    relabelings = [
        r
        for b in yaml_blocks(section)
        if isinstance(b, dict)
        for r in ((b.get("serviceMonitor") or {}).get("relabelings") or [])
    ]
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
    } in [{k: r[k] for k in ("sourceLabels", "targetLabel")} for r in relabelings]
    # The GPU and XID alerts read dcgm.rules.yml's normalised gpu:* series: every aggregation on the way keeps it.
    checked = 0
    for name in ("dcgm", "gpu", "xid"):
        for group in yaml.safe_load((ROOT / "alertmanager" / "rules" / f"{name}.rules.yml").read_text())["groups"]:
            for rule in [r for r in group["rules"] if re.search(r"DCGM_FI_|gpu:", r["expr"])]:
                for kept in re.findall(r"by \(([^)]*)\)", rule["expr"]):
                    assert "node" in [label.strip() for label in kept.split(",")], rule.get("alert") or rule["record"]
                    checked += 1
    assert checked >= 15
