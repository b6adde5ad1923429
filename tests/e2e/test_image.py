"""The Dockerfile builds, and its image runs remediate the way the chart runs it.

buildah builds the shipped Dockerfile on a stand-in for python:3.11-slim (Debian bookworm's Python 3.11:
tests/support/image.py says why and how), then the image runs `remediate --help` through its own
ENTRYPOINT, as `docker run IMAGE --help` does. The chart gives the server and agent containers `args`
only, so what the image says (entrypoint, user, ports) is checked against what `helm template` renders,
and the image serves with the chart's rendered config, playbooks and Secret mounted where its Deployment
mounts them, as the chart's non-root uid and gid.

What chroot isolation cannot show: a read-only root file system (the chart's readOnlyRootFilesystem) and
the pod's own network; the server binds 127.0.0.1 on a free port, not the chart's 0.0.0.0:9095.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from packaging.utils import canonicalize_name

from remediate import __version__
from scripts import constraints
from tests.support.helm import Helm, by_kind
from tests.support.helmtool import ROOT
from tests.support.image import Buildah, Container
from tests.support.processes import log_tail
from tests.support.realsystems import free_port
from tests.support.waiting import scaled, wait_until

pytestmark = pytest.mark.integration

TAG = "localhost/remediate:test"


@pytest.fixture(scope="module")
def image(image_builder: Buildah) -> Iterator[Container]:
    image_builder.build(ROOT, TAG)
    with image_builder.container(TAG) as container:
        yield container


def test_the_image_runs_remediate_help_through_its_entrypoint(image: Container) -> None:
    result = image.run([*image.config.entrypoint, "--help"])
    assert result.stdout.startswith("Usage: remediate"), result.stdout
    for command in ("serve", "agent", "agent-credential"):  # what the chart's containers run
        assert f"\n  {command} " in result.stdout, result.stdout
    version = image.run([*image.config.entrypoint, "--version"]).stdout
    assert __version__ in version


def test_the_image_installs_exactly_the_versions_of_the_constraints_file(image: Container) -> None:
    """The image ships what the suite ran on (constraints.txt), not whatever was newest the day it was built."""
    listed = image.run(["python", "-m", "pip", "list", "--format=json", "--disable-pip-version-check"]).stdout
    installed = {canonicalize_name(p["name"]): p["version"] for p in json.loads(listed)}
    pins = constraints.read()
    assert {name: installed.get(name) for name in pins} == pins


def test_the_image_runs_as_the_non_root_user_and_ports_the_chart_expects(image: Container, helm: Helm) -> None:
    objects = helm.objects()
    server_pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    (server,) = server_pod["containers"]
    agent_pod = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    # The chart sets args only: the image's ENTRYPOINT is the program, and remediate is what it must be.
    for container in [server, *agent_pod["containers"], *agent_pod["initContainers"]]:
        assert "command" not in container, container["name"]
    assert image.config.entrypoint == ("remediate",)
    # The image's USER is the chart's uid, numeric: `docker run` is non-root too, and a pod without runAsUser
    # passes runAsNonRoot (the kubelet can only check a numeric USER).
    assert image.config.user == str(server_pod["securityContext"]["runAsUser"]) == "10001"
    assert server_pod["securityContext"]["runAsNonRoot"] is True
    assert image.run(["id", "-u"]).stdout.strip() == image.config.user
    # The image's default command is the server's, and it documents the ports the chart's containers listen on.
    assert list(image.config.cmd) == server["args"]
    ports = {f"{port['containerPort']}/tcp" for each in [server, *agent_pod["containers"]] for port in each["ports"]}
    assert ports == {"9095/tcp", "9096/tcp"}
    assert ports <= image.config.exposed_ports


def chart_volumes(objects: list[dict[str, Any]], pod: dict[str, Any], root: Path) -> list[str]:
    """The server container's volumes as SRC:DEST[:ro] mounts, made under `root` as the kubelet makes them: the
    rendered ConfigMaps' and Secret's files, directories for the others; group-owned by the pod's fsGroup."""
    group = pod["securityContext"]["fsGroup"]
    sources = {}
    for volume in pod["volumes"]:
        source = sources[volume["name"]] = root / volume["name"]
        source.mkdir()
        os.chown(source, 0, group)
        if "configMap" in volume:
            for file, text in by_kind(objects, "ConfigMap", volume["configMap"]["name"])["data"].items():
                (source / file).write_text(text)
        elif "secret" in volume:
            for file, value in by_kind(objects, "Secret", volume["secret"]["secretName"])["data"].items():
                (source / file).write_bytes(base64.b64decode(value))
                os.chown(source / file, 0, group)
                (source / file).chmod(volume["secret"]["defaultMode"])
        else:  # emptyDir, PersistentVolumeClaim: writable by the pod's group
            source.chmod(0o2770)
    (server,) = pod["containers"]
    return [
        f"{sources[mount['name']] / mount.get('subPath', '')}:{mount['mountPath']}"
        + (":ro" if mount.get("readOnly") else "")
        for mount in server["volumeMounts"]
    ]


def test_the_image_serves_with_the_charts_config_mounts_and_user(image: Container, helm: Helm, tmp_path: Path) -> None:
    objects = helm.objects()
    pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    volumes = chart_volumes(objects, pod, tmp_path)
    tokens = {path.name: path.read_text() for path in (tmp_path / "secrets").iterdir()}
    url = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "serve.log"
    bind = {"REMEDIATE_BIND": url.removeprefix("http://")}
    user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    argv = [*image.config.entrypoint, *server["args"]]
    with image.started(argv, user=user, env=bind, volumes=volumes, log=log) as process:

        def ready() -> dict[str, Any] | None:
            assert process.poll() is None, f"the server exited (rc={process.returncode}):\n{log_tail(log)}"
            try:
                answer = requests.get(f"{url}/readyz", timeout=scaled(5))
            except requests.ConnectionError:
                return None
            return answer.json() if answer.status_code == 200 else None

        readiness = wait_until(ready, timeout=30, interval=0.2, message=f"/readyz of the image's server ({log})")
        assert readiness["playbooks"] == len(list((tmp_path / "playbooks").glob("*.yaml"))), readiness
        history = requests.get(
            f"{url}/history", headers={"Authorization": f"Bearer {tokens['operator-token']}"}, timeout=scaled(5)
        )
        assert history.status_code == 200, history.text  # the Secret's files, readable by the pod's user
    database = tmp_path / "data" / "remediate.db"
    assert database.stat().st_uid == pod["securityContext"]["runAsUser"], log_tail(log)  # in the writable volume
