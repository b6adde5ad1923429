"""The Dockerfile builds, and its image runs remediate the way the chart runs it.

buildah builds the shipped Dockerfile on a stand-in for python:3.11-slim (Debian bookworm's Python 3.11:
tests/support/image.py says why and how), then the image runs `remediate --help` through its own
ENTRYPOINT, as `docker run IMAGE --help` does. The chart gives the server and agent containers `args`
only, so what the image says (entrypoint, user, ports) is checked against what `helm template` renders.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from remediate import __version__
from tests.support.helm import Helm, by_kind
from tests.support.helmtool import ROOT
from tests.support.image import Buildah, Container

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


def test_the_image_runs_as_the_non_root_user_and_ports_the_chart_expects(image: Container, helm: Helm) -> None:
    objects = helm.objects()
    server_pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    (server,) = server_pod["containers"]
    agent_pod = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    # The chart sets args only: the image's ENTRYPOINT is the program, and remediate is what it must be.
    for container in [server, *agent_pod["containers"], *agent_pod["initContainers"]]:
        assert "command" not in container, container["name"]
    assert image.config.entrypoint == ("remediate",)
    # runAsNonRoot can only be checked by the kubelet against a numeric USER; the chart's uid is the image's.
    assert image.config.user == str(server_pod["securityContext"]["runAsUser"]) == "10001"
    assert server_pod["securityContext"]["runAsNonRoot"] is True
    assert image.run(["id", "-u"]).stdout.strip() == image.config.user
    # The image's default command is the server's, and it documents the ports the chart's containers listen on.
    assert list(image.config.cmd) == server["args"]
    ports = {f"{port['containerPort']}/tcp" for each in [server, *agent_pod["containers"]] for port in each["ports"]}
    assert ports == {"9095/tcp", "9096/tcp"}
    assert ports <= image.config.exposed_ports
