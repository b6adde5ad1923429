"""Aging out control directories never reaches outside the control root."""

from __future__ import annotations

import time
from pathlib import Path

from remediate.training import ControlOptions, TrainingControl
from remediate.training.controldirs import age_out
from remediate.training.files import JobPaths, atomic_write_json, read_json


def _closed_long_ago(root: Path, name: str) -> JobPaths:
    """A job directory as a job that closed two days ago (with an acknowledgement then) leaves it."""
    control = TrainingControl(name, root=root, options=ControlOptions(wake_signal=None)).register()
    paths = JobPaths(root, name)
    (paths.outbox / "r1-s0-x.json").write_text("{}")  # an acknowledgement: close() keeps the directory
    control.close()
    data = read_json(paths.registration) | {"closed_at": time.time() - 2 * 24 * 3600}
    atomic_write_json(paths.registration, data, tmp_dir=paths.tmp)
    return paths


def test_a_symlinked_name_is_never_followed_when_aging_out(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    victim = _closed_long_ago(elsewhere, "victim")  # stale by every rule, but not under this root
    (root / "victim").symlink_to(victim.dir)
    _closed_long_ago(root, "stale")

    assert age_out(root, "newcomer") == ["stale"]
    assert victim.registration.exists() and victim.lock.exists()  # nothing outside the root was touched
    assert not (root / "stale").exists() and (root / "victim").is_symlink()
