"""Build the repository's Dockerfile and run its image without a Docker daemon or a registry: buildah.

The Dockerfile starts `FROM python:3.11-slim`, an image on Docker Hub, which the test machines cannot reach
(they reach PyPI and Debian's mirror). So the `image_builder` fixture makes a stand-in for it: mmdebstrap
writes a Debian bookworm root file system with bookworm's Python 3.11 from the Debian mirror, and a venv
over /usr/local puts `python` and a `pip` that may install (no PEP 668 "externally managed" refusal) first
on PATH, where python:3.11-slim has them. That is committed, in a buildah store of the test's own (nothing
touches /var/lib/containers), as docker.io/library/python:3.11-slim, and `buildah build --pull=never`
builds the Dockerfile exactly as shipped on top of it; its `pip` steps reach PyPI.

buildah runs with chroot isolation and the vfs storage driver: no OCI runtime, no overlay mounts, no user
namespaces, so it works as root inside a container as well (scripts/test installs buildah and mmdebstrap
as root). `Container.run` runs a command in an image as `docker run` would: the image's user, environment
and working directory, the host's network.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.waiting import scaled

# The Dockerfile's base image, and the Debian release whose Python is the same minor version (3.11).
BASE_IMAGE = "docker.io/library/python:3.11-slim"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# This host's CA bundle goes into the stand-in base (and pip is pointed at it): where the network passes
# through a TLS-inspecting proxy, pip's own certifi bundle would refuse PyPI.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
REQUIRED_VARIABLE = "REMEDIATE_IMAGE_REQUIRED"


@dataclass(frozen=True)
class ImageConfig:
    """What an OCI image says about how it runs (`buildah inspect`): what a Pod spec adds its args to."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    user: str
    exposed_ports: frozenset[str]


@dataclass(frozen=True)
class Buildah:
    binary: str
    storage: Path

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """One buildah command on the private store; raises with its output when it fails."""
        return checked(self.argv(*args), timeout=timeout, env=self.env())

    def argv(self, *args: str) -> list[str]:
        storage = ["--root", str(self.storage / "root"), "--runroot", str(self.storage / "run")]
        return [self.binary, *storage, "--storage-driver", "vfs", *args]

    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_REGISTRIES_CONF": str(self.storage / "registries.conf")}

    def build(self, context: Path, tag: str) -> None:
        """Build `context`'s Dockerfile into `tag` (its base must be in the store already: nothing is pulled)."""
        self("build", "--isolation", "chroot", "--pull=never", "--tag", tag, str(context), timeout=600)

    def config(self, image: str) -> ImageConfig:
        config = json.loads(self("inspect", "--type", "image", image).stdout)["OCIv1"]["config"]
        return ImageConfig(
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            user=config.get("User", ""),
            exposed_ports=frozenset(config.get("ExposedPorts") or {}),
        )

    @contextlib.contextmanager
    def container(self, image: str) -> Iterator[Container]:
        """A working container of `image` (vfs copies the whole image for each: tests share one)."""
        name = self("from", "--pull=never", image).stdout.strip()
        try:
            yield Container(self, name, self.config(image))
        finally:
            self("rm", name)


@dataclass(frozen=True)
class Container:
    buildah: Buildah
    name: str
    config: ImageConfig

    def run(self, argv: Sequence[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run `argv` (the whole command line, entrypoint included) as the image's user, with its environment."""
        return self.buildah("run", "--isolation", "chroot", self.name, "--", *argv, timeout=timeout)

    @contextlib.contextmanager
    def started(
        self, argv: Sequence[str], *, user: str, env: Mapping[str, str], volumes: Sequence[str], log: Path
    ) -> Iterator[subprocess.Popen[bytes]]:
        """`argv` running in the container as `user` (UID:GID, as a pod's runAsUser/runAsGroup override the
        image's USER), with `env` added and `volumes` (SRC:DEST[:ro]) mounted.

        Stopped with SIGTERM, which buildah passes on to the program, as a kubelet stops a container; its
        process group (buildah and everything under it) is killed should it outlive the grace period.
        """
        options = [f"--user={user}", *(f"--env={name}={value}" for name, value in env.items())]
        options += [f"--volume={volume}" for volume in volumes]
        command = self.buildah.argv("run", "--isolation", "chroot", *options, self.name, "--", *argv)
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=self.buildah.env(), start_new_session=True
            )
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=scaled(20))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def checked(
    argv: Sequence[str], *, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` (`timeout`: an idle machine's bound, scaled); raises with its output when it fails."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=scaled(timeout), env=env, check=False)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed (rc={result.returncode}):\n{result.stdout}{result.stderr}")
    return result


def debian_python_rootfs(tarball: Path) -> None:
    """Write a bookworm root file system with Python 3.11, venv and useradd (passwd) into `tarball`."""
    packages = "--include=passwd,python3,python3-venv"
    checked(
        ["mmdebstrap", "--variant=essential", packages, "--mode=root", DEBIAN_SUITE, str(tarball), DEBIAN_MIRROR],
        timeout=300,
    )


def commit_stand_in_base(buildah: Buildah, tarball: Path) -> None:
    """Commit `tarball` as BASE_IMAGE, with python and pip in /usr/local/bin as python:3.11-slim has them."""
    container = buildah("from", "scratch").stdout.strip()
    buildah("add", container, str(tarball), "/", timeout=300)
    config = ["--env", "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin", "--cmd", "python3"]
    if CA_BUNDLE.is_file():
        buildah("copy", container, str(CA_BUNDLE), str(CA_BUNDLE))
        config += ["--env", f"PIP_CERT={CA_BUNDLE}"]
    buildah("run", "--isolation", "chroot", container, "--", "python3", "-m", "venv", "/usr/local")
    buildah("config", *config, container)
    buildah("commit", "--rm", container, BASE_IMAGE, timeout=300)


def missing_requirements() -> list[str]:
    missing = [f"{tool} (apt-get install {tool})" for tool in ("buildah", "mmdebstrap") if not shutil.which(tool)]
    if os.geteuid() != 0:
        missing.append("root (mmdebstrap --mode=root and buildah's chroot isolation run as root)")
    return missing


@pytest.fixture(scope="session")
def image_builder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buildah]:
    """A private buildah store holding the stand-in BASE_IMAGE; removed afterwards (vfs copies every layer)."""
    missing = missing_requirements()
    if missing:
        message = f"cannot build the image: no {', '.join(missing)}; scripts/test installs both as root"
        if os.environ.get(REQUIRED_VARIABLE):
            pytest.fail(message)
        pytest.skip(message)
    storage = tmp_path_factory.mktemp("buildah")
    # Short names (python:3.11-slim) resolve to docker.io, whatever this host's registries.conf says.
    (storage / "registries.conf").write_text('unqualified-search-registries = ["docker.io"]\n')
    buildah = Buildah(shutil.which("buildah") or "buildah", storage)
    try:
        debian_python_rootfs(storage / "rootfs.tar")
        commit_stand_in_base(buildah, storage / "rootfs.tar")
        yield buildah
    finally:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            buildah("rm", "--all")  # containers a failed test left behind
        shutil.rmtree(storage, ignore_errors=True)
