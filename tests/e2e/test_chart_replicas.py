"""Several server replicas on PostgreSQL, one on SQLite.

Rendered with `helm template` and checked object by object: the refusal of replicas > 1 without an external
database, the PodDisruptionBudget, the spread over nodes, the rollout strategy, no volume claim with an
external database; the shipped values examples (CloudNativePG, any PostgreSQL) render valid objects; and
docs/install.md shows the same CloudNativePG Cluster as the example file.
"""

from __future__ import annotations

import re
from typing import Any

import click
import kubernetes_validate
import pytest
import sqlalchemy as sa
import yaml

from remediate.cli import main
from remediate.config.settings import load_settings
from tests.support.helm import CHART, Helm, by_kind

ROOT = CHART.parents[1]
EXAMPLES = CHART / "examples"
INSTALL = ROOT / "docs" / "install.md"
POSTGRES = {"database": {"url": "postgresql+psycopg://remediate:pw@pg.db.svc/remediate"}}
SERVER_POD_LABELS = {
    "app.kubernetes.io/name": "remediate",
    "app.kubernetes.io/instance": "rel",
    "app.kubernetes.io/component": "server",
}


def several(replicas: int = 2, **values: Any) -> dict[str, Any]:
    return {"replicaCount": replicas, **POSTGRES, **values}


def kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def refusal(helm: Helm, values: dict[str, Any]) -> str:
    result = helm.template(values, check=False)
    assert result.returncode != 0, f"rendered although it should not: {values}"
    return result.stderr


def test_a_database_url_is_refused_where_its_secret_would_not_be_rendered(helm: Helm) -> None:
    """database.url lives in the chart's tokens Secret; with auth.existingSecret it would be dropped."""
    message = refusal(helm, several(2, auth={"existingSecret": "my-tokens"}))

    assert "put the URL into a Secret of yours and name it in database.existingSecret" in message
    objects = helm.objects(
        {**several(2), "auth": {"existingSecret": "my-tokens"}, "database": {"existingSecret": "db"}}
    )
    (server,) = pod_spec(objects)["containers"]
    assert server["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "db", "key": "database-url"}


# --------------------------------------------------------------------------- SQLite: one replica


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 2},
        {"replicaCount": 3, "persistence": {"enabled": False}},
        {"replicaCount": 2, "persistence": {"existingClaim": "shared-rwx"}},
    ],
)
def test_several_replicas_without_an_external_database_are_refused(helm: Helm, values: dict[str, Any]) -> None:
    message = refusal(helm, values)

    assert "replicaCount > 1 needs an external database (database.url or database.existingSecret)" in message
    assert "SQLite serves one replica" in message


def test_several_replicas_on_a_sqlite_database_url_are_refused(helm: Helm) -> None:
    message = refusal(helm, {"replicaCount": 2, "database": {"url": "sqlite:////shared/remediate.db"}})

    assert "database.url is a SQLite file, which serves one replica" in message


def test_one_sqlite_replica_is_recreated_on_its_claim_without_budget_or_spread(helm: Helm) -> None:
    objects = helm.objects()

    deployment = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert by_kind(objects, "PersistentVolumeClaim")["metadata"]["name"] == "rel-remediate-data"
    assert not kinds(objects, "PodDisruptionBudget")
    assert "topologySpreadConstraints" not in pod_spec(objects)
    assert "affinity" not in pod_spec(objects)


# --------------------------------------------------------------------------- PostgreSQL: several replicas


def test_several_replicas_on_postgresql_get_a_budget_a_spread_a_surge_rollout_and_no_claim(helm: Helm) -> None:
    objects = helm.objects(several(2))

    deployment = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert not kinds(objects, "PersistentVolumeClaim")
    assert {"name": "data", "emptyDir": {}} in pod_spec(objects)["volumes"]

    budget = by_kind(objects, "PodDisruptionBudget")
    assert budget["metadata"]["name"] == "rel-remediate"
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SERVER_POD_LABELS}}

    assert pod_spec(objects)["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": SERVER_POD_LABELS},
        }
    ]
    assert "affinity" not in pod_spec(objects)
    for obj in objects:
        if obj["kind"] in {"Deployment", "PodDisruptionBudget"}:
            kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_the_budget_and_the_spread_select_exactly_the_server_pods(helm: Helm) -> None:
    objects = helm.objects(several(3))

    server_pods = by_kind(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    agent_pods = by_kind(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    budget = by_kind(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    (spread,) = pod_spec(objects)["topologySpreadConstraints"]

    for selector in (budget, spread["labelSelector"]["matchLabels"]):
        assert selector.items() <= server_pods.items()
        assert not selector.items() <= agent_pods.items()


def test_one_replica_on_postgresql_rolls_without_a_gap_and_needs_no_budget_or_spread(helm: Helm) -> None:
    objects = helm.objects(several(1))

    assert by_kind(objects, "Deployment")["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert not kinds(objects, "PersistentVolumeClaim")
    assert not kinds(objects, "PodDisruptionBudget")
    assert "topologySpreadConstraints" not in pod_spec(objects)


@pytest.mark.parametrize(
    ("budget", "spec"),
    [
        ({"minAvailable": 2}, {"minAvailable": 2}),
        ({"maxUnavailable": "50%"}, {"maxUnavailable": "50%"}),
        ({"maxUnavailable": None, "minAvailable": "66%"}, {"minAvailable": "66%"}),
    ],
)
def test_the_budget_takes_min_available_instead_or_a_percentage(
    helm: Helm, budget: dict[str, Any], spec: dict[str, Any]
) -> None:
    objects = helm.objects(several(3, podDisruptionBudget=budget))

    rendered = by_kind(objects, "PodDisruptionBudget")["spec"]
    assert {k: v for k, v in rendered.items() if k != "selector"} == spec
    kubernetes_validate.validate(by_kind(objects, "PodDisruptionBudget"), "1.30.0", strict=True)


def test_the_budget_can_be_left_out_and_is_never_empty(helm: Helm) -> None:
    assert not kinds(helm.objects(several(2, podDisruptionBudget={"enabled": False})), "PodDisruptionBudget")

    message = refusal(helm, several(2, podDisruptionBudget={"maxUnavailable": None}))
    assert "podDisruptionBudget: set maxUnavailable or minAvailable" in message


def test_the_default_spread_can_be_made_strict_or_turned_off(helm: Helm) -> None:
    strict = helm.objects(several(2, topologySpread={"whenUnsatisfiable": "DoNotSchedule"}))
    (constraint,) = pod_spec(strict)["topologySpreadConstraints"]
    assert constraint["whenUnsatisfiable"] == "DoNotSchedule"
    assert constraint["topologyKey"] == "kubernetes.io/hostname"

    zones = helm.objects(several(3, topologySpread={"topologyKey": "topology.kubernetes.io/zone"}))
    assert pod_spec(zones)["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"

    off = helm.objects(several(2, topologySpread={"enabled": False}))
    assert "topologySpreadConstraints" not in pod_spec(off)


def test_the_users_own_constraints_and_affinity_replace_the_default_spread(helm: Helm) -> None:
    own_selector = {"matchLabels": {"team": "sre"}}
    constraints = [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"},
        {
            "maxSkew": 2,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": own_selector,
        },
    ]
    affinity = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": SERVER_POD_LABELS}}
            ]
        }
    }

    objects = helm.objects(several(2, topologySpreadConstraints=constraints, affinity=affinity))

    spec = pod_spec(objects)
    assert spec["topologySpreadConstraints"] == [
        {**constraints[0], "labelSelector": {"matchLabels": SERVER_POD_LABELS}},
        constraints[1],
    ]
    assert spec["affinity"] == affinity
    kubernetes_validate.validate(by_kind(objects, "Deployment"), "1.30.0", strict=True)

    one_replica = pod_spec(helm.objects({"topologySpreadConstraints": constraints[1:]}))
    assert one_replica["topologySpreadConstraints"] == constraints[1:]


@pytest.mark.parametrize(
    "values",
    [
        {"topologySpread": {"whenUnsatisfiable": "Sometimes"}},
        {"topologySpread": {"maxSkew": 0}},
        {"podDisruptionBudget": {"maxUnavailable": "half"}},
        {"podDisruptionBudget": {"minAvailable": -1}},
        {"topologySpreadConstraints": [{"topologyKey": "kubernetes.io/hostname"}]},
    ],
)
def test_invalid_replica_values_are_refused_by_the_schema(helm: Helm, values: dict[str, Any]) -> None:
    result = helm.lint(values)

    assert result.returncode != 0, result.stdout


# --------------------------------------------------------------------------- the shipped examples


def example(name: str) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    return values


@pytest.mark.parametrize("name", ["values-cloudnativepg.yaml", "values-external-postgres.yaml"])
def test_each_values_example_renders_two_valid_replicas_on_its_databases_secret(helm: Helm, name: str) -> None:
    path = EXAMPLES / name
    lint = helm.run("lint", "--strict", str(CHART), "-f", str(path), check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    objects = helm.objects(extra=("-f", str(path)))

    database = example(name)["database"]
    assert database["existingSecret"] and not database.get("url")
    deployment = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    (server,) = pod_spec(objects)["containers"]
    assert {
        "name": "REMEDIATE_DATABASE_URL",
        "valueFrom": {"secretKeyRef": {"name": database["existingSecret"], "key": database["existingSecretKey"]}},
    } in server["env"]
    assert "database-url" not in by_kind(objects, "Secret")["data"]
    assert not kinds(objects, "PersistentVolumeClaim")
    assert by_kind(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert pod_spec(objects)["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    for obj in objects:
        kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_the_cloudnativepg_example_reads_the_secret_its_cluster_generates() -> None:
    cluster = yaml.safe_load((EXAMPLES / "cloudnativepg-cluster.yaml").read_text(encoding="utf-8"))
    values = example("values-cloudnativepg.yaml")

    assert (cluster["apiVersion"], cluster["kind"]) == ("postgresql.cnpg.io/v1", "Cluster")
    assert cluster["spec"]["instances"] >= 2
    # CloudNativePG names the application user's Secret <cluster>-app; `uri` holds a libpq URL.
    assert values["database"] == {"existingSecret": f"{cluster['metadata']['name']}-app", "existingSecretKey": "uri"}
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    uri = f"postgresql://{initdb['owner']}:pw@{cluster['metadata']['name']}-rw.remediate:5432/{initdb['database']}"

    url = load_settings(env={"REMEDIATE_DATABASE_URL": uri}).store.url

    assert sa.make_url(url).get_dialect().driver == "psycopg"
    assert sa.make_url(url).database == initdb["database"]


def test_the_external_postgres_example_names_a_url_remediate_accepts() -> None:
    text = (EXAMPLES / "values-external-postgres.yaml").read_text(encoding="utf-8")
    (url,) = re.findall(r"--from-literal=url='([^']+)'", text)

    assert sa.make_url(load_settings(env={"REMEDIATE_DATABASE_URL": url}).store.url).get_dialect().driver == ("psycopg")


# --------------------------------------------------------------------------- docs/install.md


def install_section(title: str) -> str:
    text = INSTALL.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, f"docs/install.md has no section {title!r}"
    return match.group(1)


def test_install_docs_show_the_example_cluster_and_values_and_a_db_copy_pod_the_cli_accepts(helm: Helm) -> None:
    section = install_section("One replica or several")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.S)]

    cluster = yaml.safe_load((EXAMPLES / "cloudnativepg-cluster.yaml").read_text(encoding="utf-8"))
    assert cluster in blocks
    values = example("values-cloudnativepg.yaml")
    assert any(isinstance(b, dict) and b.get("database") == values["database"] for b in blocks)
    for name in ("cloudnativepg-cluster.yaml", "values-cloudnativepg.yaml", "values-external-postgres.yaml"):
        assert f"helm/remediate/examples/{name}" in section
        assert (EXAMPLES / name).is_file()
    (copy_pod,) = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "Pod"]
    kubernetes_validate.validate(copy_pod, "1.30.0", strict=True)
    (claim,) = [v["persistentVolumeClaim"]["claimName"] for v in copy_pod["spec"]["volumes"]]
    installed = helm.run(
        "template", "remediate", str(CHART), "--namespace", "remediate", *helm.values_file(None)
    ).stdout
    assert claim in [
        o["metadata"]["name"] for o in yaml.safe_load_all(installed) if o and o["kind"] == "PersistentVolumeClaim"
    ]
    assert re.search(r"remediate db copy --from sqlite:///\S+ --to postgresql\+psycopg://", section)
    assert "remediate db copy --from URL --to URL" in section
    # The Pod's args are a command line the real `remediate` accepts (tests/cli/test_db_copy.py runs it),
    # reading the SQLite file on the claim it mounts.
    (container,) = copy_pod["spec"]["containers"]
    words = [w.replace("$(DATABASE_URL)", "postgresql://app:pw@remediate-pg-rw:5432/app") for w in container["args"]]
    command: click.Command = main
    while isinstance(command, click.Group):
        command = command.commands[words.pop(0)]
    with command.make_context("copy", words) as context:
        (mount,) = container["volumeMounts"]
        assert context.params["source"] == f"sqlite:///{mount['mountPath']}/remediate.db"
        assert context.params["target"].startswith("postgresql://")
