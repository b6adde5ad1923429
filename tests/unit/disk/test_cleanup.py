"""Cleanup on real directory trees: what is selected, in which order, where it stops, and what it never touches."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from remediate.disk import Cleaner, CleanupError, FsHooks, Target
from remediate.disk.policy import CleanupPolicy
from tests.support.disk import FakeDisk, allocated, make_file

Policy = Callable[..., CleanupPolicy]
EVERYTHING = Target(free_bytes=2**62)  # never met: runs until the candidates or a cap run out


def names(report: dict, key: str = "deleted") -> list[str]:
    return [Path(entry["path"]).name for entry in report[key]]


def tree_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


# ------------------------------------------------------------------ selection


def test_only_files_matching_the_patterns_and_old_enough_are_deleted_oldest_first(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    make_file(root / "a.tmp", age_days=3)
    make_file(root / "sub" / "b.tmp", age_days=9)
    make_file(root / "sub" / "deep" / "c.tmp", age_days=5)
    make_file(root / "young.tmp", age_days=0.5)
    make_file(root / "keep.dat", age_days=30)
    make_file(root / "sub" / "x.lock.tmp", age_days=30)
    policy = make_policy(patterns=["*.tmp"], exclude=["*.lock.tmp"], min_age="1d")

    report = Cleaner(policy, free_space=disk).execute(EVERYTHING)

    assert names(report) == ["b.tmp", "c.tmp", "a.tmp"]
    assert tree_files(root) == {"young.tmp", "keep.dat", "sub/x.lock.tmp"}
    assert report["scan"]["kept"] == {"too_young": 1}
    assert report["stopped_by"] == "no_candidates_left"
    assert report["deleted_files"] == 3
    assert report["deleted_bytes"] == 3000


def test_path_patterns_match_relative_to_the_root(root: Path, make_policy: Policy, disk: FakeDisk) -> None:
    make_file(root / "cache" / "x.bin")
    make_file(root / "cache" / "nested" / "y.bin")
    make_file(root / "runs" / "r1" / "cache" / "z.bin")
    make_file(root / "x.bin")
    report = Cleaner(make_policy(patterns=["cache/*", "**/r1/cache/*"]), free_space=disk).execute(EVERYTHING)
    assert sorted(names(report)) == ["x.bin", "z.bin"]
    assert tree_files(root) == {"cache/nested/y.bin", "x.bin"}


def test_keep_newest_keeps_the_n_newest_matching_files_of_each_directory_even_when_old(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    for run in ("run-a", "run-b"):
        for step, age in ((100, 40), (200, 30), (300, 20), (400, 10)):
            make_file(root / run / f"ckpt-{step}.pt", age_days=age)
        make_file(root / run / "metrics.json", age_days=50)
    make_file(root / "run-c" / "ckpt-100.pt", age_days=40)
    policy = make_policy(patterns=["*/ckpt-*.pt"], keep_newest=2)

    report = Cleaner(policy, free_space=disk).execute(EVERYTHING)

    assert sorted(entry["path"].split("/root/")[1] for entry in report["deleted"]) == [
        "run-a/ckpt-100.pt",
        "run-a/ckpt-200.pt",
        "run-b/ckpt-100.pt",
        "run-b/ckpt-200.pt",
    ]
    assert tree_files(root) == {
        "run-a/ckpt-300.pt",
        "run-a/ckpt-400.pt",
        "run-a/metrics.json",
        "run-b/ckpt-300.pt",
        "run-b/ckpt-400.pt",
        "run-b/metrics.json",
        "run-c/ckpt-100.pt",
    }
    assert report["scan"]["kept"] == {"keep_newest": 5}


def test_keep_newest_counts_young_files_so_a_fresh_checkpoint_does_not_expose_an_older_one(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    make_file(root / "run" / "ckpt-1.pt", age_days=30)
    make_file(root / "run" / "ckpt-2.pt", age_days=20)
    make_file(root / "run" / "ckpt-3.pt", age_days=0.01)  # just written
    report = Cleaner(make_policy(patterns=["*.pt"], keep_newest=2), free_space=disk).execute(EVERYTHING)
    assert names(report) == ["ckpt-1.pt"]
    assert tree_files(root) == {"run/ckpt-2.pt", "run/ckpt-3.pt"}


# ------------------------------------------------------------------ target and caps


def test_deletion_stops_as_soon_as_the_free_space_target_is_met(root: Path, make_policy: Policy) -> None:
    files = [make_file(root / f"f{i}.tmp", 8192, age_days=20 - i) for i in range(6)]
    disk = FakeDisk(root, capacity=1024 * 1024)
    per_file = allocated(files[0])
    target = Target(free_bytes=disk.free + 2 * per_file + 1)  # two files are not enough, three are

    report = Cleaner(make_policy(), free_space=disk).execute(target)

    assert names(report) == ["f0.tmp", "f1.tmp", "f2.tmp"]
    assert report["stopped_by"] == "target_met"
    assert report["target_met"] is True
    assert report["free_after_bytes"] - report["free_before_bytes"] == 3 * per_file
    assert report["bytes_freed"] == 3 * per_file
    assert report["free_after_bytes"] >= report["target_free_bytes"]
    assert tree_files(root) == {"f3.tmp", "f4.tmp", "f5.tmp"}


def test_a_target_already_met_deletes_nothing(root: Path, make_policy: Policy, disk: FakeDisk) -> None:
    make_file(root / "old.tmp", age_days=100)
    report = Cleaner(make_policy(), free_space=disk).execute(Target(free_percent=1))
    assert report["deleted"] == []
    assert report["stopped_by"] == "target_already_met"
    assert tree_files(root) == {"old.tmp"}


def test_free_percent_is_a_share_of_the_filesystem_size(root: Path, make_policy: Policy) -> None:
    for i in range(4):
        make_file(root / f"f{i}.tmp", 4096 * 25, age_days=10 - i)
    disk = FakeDisk(root, capacity=4 * allocated(root / "f0.tmp") * 2)  # the files fill half of it
    report = Cleaner(make_policy(), free_space=disk).execute(Target(free_percent=75))
    assert report["free_before_percent"] == 50.0
    assert names(report) == ["f0.tmp", "f1.tmp"]
    assert report["free_after_percent"] == 75.0


def test_the_max_files_cap_stops_the_run(root: Path, make_policy: Policy, disk: FakeDisk) -> None:
    for i in range(5):
        make_file(root / f"f{i}.tmp", age_days=10 - i)
    report = Cleaner(make_policy(max_files=2), free_space=disk).execute(EVERYTHING)
    assert names(report) == ["f0.tmp", "f1.tmp"]
    assert report["stopped_by"] == "max_files"
    assert report["caps"] == {"max_files": 2, "max_bytes": None}


def test_the_max_bytes_cap_is_never_exceeded_and_keeps_the_oldest_first_order(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    make_file(root / "a.tmp", 3000, age_days=10)
    make_file(root / "b.tmp", 3000, age_days=9)
    make_file(root / "c.tmp", 100, age_days=8)  # would fit, but is younger than b
    report = Cleaner(make_policy(max_bytes=5000), free_space=disk).execute(EVERYTHING)
    assert names(report) == ["a.tmp"]
    assert report["stopped_by"] == "max_bytes"
    assert report["deleted_bytes"] <= 5000


def test_caps_from_the_step_can_only_lower_the_policys_caps(root: Path, make_policy: Policy, disk: FakeDisk) -> None:
    for i in range(5):
        make_file(root / f"f{i}.tmp", age_days=10 - i)
    cleaner = Cleaner(make_policy(max_files=3), free_space=disk)
    raised = cleaner.plan(EVERYTHING, max_files=100)
    assert raised["caps"]["max_files"] == 3
    assert raised["would_delete_files"] == 3
    assert any("policy's cap applies" in note for note in raised["notes"])
    lowered = cleaner.execute(EVERYTHING, max_files=1, max_bytes=10_000)
    assert lowered["caps"] == {"max_files": 1, "max_bytes": 10_000}
    assert names(lowered) == ["f0.tmp"]


def test_the_plan_lists_files_in_order_predicts_free_space_and_changes_nothing(root: Path, make_policy: Policy) -> None:
    files = [make_file(root / f"f{i}.tmp", 8192, age_days=20 - i) for i in range(5)]
    disk = FakeDisk(root, capacity=1024 * 1024)
    per_file = allocated(files[0])
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in files}
    target = Target(free_bytes=disk.free + 2 * per_file)

    plan = Cleaner(make_policy(max_files=4), free_space=disk).plan(target)

    assert [Path(e["path"]).name for e in plan["would_delete"]] == ["f0.tmp", "f1.tmp"]
    assert plan["would_free_bytes"] == 2 * per_file
    assert plan["predicted_free_after_bytes"] == plan["free_before_bytes"] + 2 * per_file
    assert plan["target_met"] is True
    assert plan["stopped_by"] == "target_met"
    assert "would delete 2 files" in plan["summary"]
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in files} == before

    capped = Cleaner(make_policy(max_files=1), free_space=disk).plan(target)
    assert capped["stopped_by"] == "max_files"
    assert capped["target_met"] is False
    assert capped["would_delete_files"] == 1


def test_a_second_run_only_finds_what_the_first_left(root: Path, make_policy: Policy, disk: FakeDisk) -> None:
    for i in range(5):
        make_file(root / f"f{i}.tmp", age_days=10 - i)
    cleaner = Cleaner(make_policy(max_files=3), free_space=disk)
    first = cleaner.execute(EVERYTHING)
    second = cleaner.execute(EVERYTHING)
    third = cleaner.execute(EVERYTHING)
    assert names(first) == ["f0.tmp", "f1.tmp", "f2.tmp"]
    assert names(second) == ["f3.tmp", "f4.tmp"]
    assert third["deleted"] == [] and third["stopped_by"] == "no_candidates_left"


# ------------------------------------------------------------------ symlinks and other filesystems


def test_a_symlink_inside_the_root_pointing_out_is_never_followed_nor_deleted(
    root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    make_file(root / "old.tmp", age_days=10)
    (root / "evil.tmp").symlink_to(outside)  # matches the pattern itself
    (root / "evil-dir").symlink_to(outside.parent, target_is_directory=True)  # would lead out of the root
    os.utime(root / "evil.tmp", (0, 0), follow_symlinks=False)

    report = Cleaner(make_policy(patterns=["*"]), free_space=disk).execute(EVERYTHING)

    assert names(report) == ["old.tmp"]
    assert outside.read_bytes() == b"x" * 4096
    assert (root / "evil.tmp").is_symlink() and (root / "evil-dir").is_symlink()
    assert report["scan"]["skipped"]["symlink"] == 2


def test_a_file_swapped_for_a_symlink_between_scan_and_delete_is_left_alone_and_the_target_survives(
    root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    victim = make_file(root / "sub" / "a.tmp", age_days=10)
    make_file(root / "sub" / "b.tmp", age_days=9)

    def swap() -> None:
        victim.unlink()
        victim.symlink_to(outside)

    report = Cleaner(make_policy(), free_space=disk, hooks=FsHooks(after_scan=swap)).execute(EVERYTHING)

    assert outside.read_bytes() == b"x" * 4096
    assert victim.is_symlink()
    assert names(report) == ["b.tmp"]
    assert report["skipped"] == [
        {"path": str(victim), "reason": "replaced by a symbolic link since the scan: left alone"}
    ]


def test_a_symlink_swapped_in_after_the_last_check_is_unlinked_itself_never_its_target(
    root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    victim = make_file(root / "a.tmp", age_days=10)

    def swap_now(dir_fd: int, name: str) -> None:
        # The race the checks cannot close: between fstatat and unlinkat. unlinkat removes the entry.
        os.unlink(name, dir_fd=dir_fd)
        os.symlink(str(outside), name, dir_fd=dir_fd)

    Cleaner(make_policy(), free_space=disk, hooks=FsHooks(before_unlink=swap_now)).execute(EVERYTHING)

    assert not victim.exists() and not victim.is_symlink()
    assert outside.read_bytes() == b"x" * 4096


def test_a_directory_swapped_for_a_symlink_out_of_the_root_is_never_entered(
    root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    make_file(root / "d" / "model.ckpt", age_days=10)  # same name as the precious file
    make_file(root / "e.tmp", age_days=5)

    def swap() -> None:
        shutil.rmtree(root / "d")
        (root / "d").symlink_to(outside.parent, target_is_directory=True)

    report = Cleaner(make_policy(), free_space=disk, hooks=FsHooks(after_scan=swap)).execute(EVERYTHING)

    assert outside.exists()
    assert names(report) == ["e.tmp"]
    assert report["skipped"][0]["path"] == str(root / "d" / "model.ckpt")
    assert "replaced by a symbolic link" in report["skipped"][0]["reason"]


def test_a_file_modified_after_the_scan_is_left_alone(root: Path, make_policy: Policy, disk: FakeDisk) -> None:
    busy = make_file(root / "busy.tmp", age_days=10)
    report = Cleaner(
        make_policy(), free_space=disk, hooks=FsHooks(after_scan=lambda: busy.write_bytes(b"new data"))
    ).execute(EVERYTHING)
    assert busy.read_bytes() == b"new data"
    assert report["skipped"] == [{"path": str(busy), "reason": "modified since the scan: left alone"}]


def test_a_root_whose_path_holds_a_symlink_is_refused(tmp_path: Path, make_policy: Policy, disk: FakeDisk) -> None:
    real = tmp_path / "real"
    make_file(real / "old.tmp", age_days=10)
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    cleaner = Cleaner(make_policy(roots=[str(tmp_path / "alias")]), free_space=disk)
    with pytest.raises(CleanupError, match="is a symbolic link"):
        cleaner.execute(EVERYTHING)
    assert (real / "old.tmp").exists()


def test_a_missing_root_is_noted_and_the_others_are_cleaned(
    tmp_path: Path, root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    make_file(root / "old.tmp", age_days=10)
    policy = make_policy(roots=[str(tmp_path / "absent"), str(root)])
    report = Cleaner(policy, free_space=disk).execute(EVERYTHING)
    assert names(report) == ["old.tmp"]
    assert report["notes"] == [f"root {tmp_path / 'absent'} does not exist on this node: skipped"]
    with pytest.raises(CleanupError, match="none of its roots exists"):
        Cleaner(make_policy(roots=[str(tmp_path / "absent")]), free_space=disk).plan(EVERYTHING)


def test_files_on_another_filesystem_inside_the_root_are_never_touched(
    root: Path, make_policy: Policy, disk: FakeDisk, tmpfs_inside: Path | None
) -> None:
    make_file(root / "old.tmp", age_days=10)
    if tmpfs_inside is not None:
        mounted = make_file(tmpfs_inside / "on-tmpfs.tmp", age_days=10)
        hooks = FsHooks()
        how = "tmpfs"
    else:  # no mount allowed here: give one directory another device id, the way a mount would
        mounted = make_file(root / "mnt" / "on-tmpfs.tmp", age_days=10)
        hooks = FsHooks(device_of=lambda rel, st: st.st_dev + 1 if rel == "mnt" else st.st_dev)
        how = "injected device id"

    report = Cleaner(make_policy(), free_space=disk, hooks=hooks).execute(EVERYTHING)

    assert mounted.exists(), how
    assert names(report) == ["old.tmp"]
    assert report["scan"]["skipped"]["other_filesystem"] == 1, how
    assert report["scan"]["skipped_examples"]["other_filesystem"] == [str(root / "mnt")]


def test_a_bind_mount_of_the_same_filesystem_inside_the_root_is_not_entered(
    tmp_path: Path, root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    target = root / "bound"
    target.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("bind mounts need root and mount(8)")
    result = subprocess.run(["mount", "--bind", str(outside.parent), str(target)], capture_output=True, check=False)
    if result.returncode != 0:
        pytest.skip("bind mounts are not allowed here")
    try:
        make_file(root / "old.tmp", age_days=10)
        os.utime(outside, (0, 0))
        report = Cleaner(make_policy(), free_space=disk).execute(EVERYTHING)
        assert (target / outside.name).exists()
        assert names(report) == ["old.tmp"]
        assert report["scan"]["skipped"].get("mount_point") == 1
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
    assert outside.exists()


def test_real_free_space_on_a_tmpfs_reaches_the_target(tmpfs_inside: Path | None, make_policy: Policy) -> None:
    if tmpfs_inside is None:
        pytest.skip("cannot mount a tmpfs here (the fake-disk tests cover the target)")
    files = [make_file(tmpfs_inside / f"f{i}.bin", 256 * 1024, age_days=10 - i) for i in range(8)]
    before = os.statvfs(tmpfs_inside)
    free = before.f_bavail * before.f_frsize
    target = Target(free_bytes=free + 3 * allocated(files[0]))
    report = Cleaner(make_policy(roots=[str(tmpfs_inside)])).execute(target)  # the real os.statvfs
    assert names(report) == ["f0.bin", "f1.bin", "f2.bin"]
    assert report["stopped_by"] == "target_met"
    assert report["target_met"] is True
    assert report["free_after_bytes"] >= target.free_bytes


# ------------------------------------------------------------------ failures


def _immutable(path: Path) -> bool:
    result = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    return result.returncode == 0


def test_a_file_that_cannot_be_deleted_is_skipped_with_the_reason_and_the_rest_continue(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    stuck = make_file(root / "stuck.tmp", age_days=10)
    make_file(root / "next.tmp", age_days=9)
    hooks = FsHooks()
    if os.geteuid() != 0:
        stuck_dir = root / "ro"
        stuck = make_file(stuck_dir / "stuck.tmp", age_days=10)
        (root / "stuck.tmp").unlink()
        stuck_dir.chmod(0o555)
        expected = "Permission denied (EACCES)"
    elif shutil.which("chattr") and _immutable(stuck):
        expected = "Operation not permitted (EPERM)"
    else:  # root without chattr: the kernel would refuse the same way

        def refuse(dir_fd: int, name: str) -> None:
            if name == "stuck.tmp":
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

        hooks = FsHooks(before_unlink=refuse)
        expected = "Permission denied (EACCES)"
    try:
        report = Cleaner(make_policy(), free_space=disk, hooks=hooks).execute(EVERYTHING)
    finally:
        if shutil.which("chattr"):
            subprocess.run(["chattr", "-i", str(stuck)], capture_output=True, check=False)
        stuck.parent.chmod(0o755)
    assert stuck.exists()
    assert names(report) == ["next.tmp"]
    assert report["skipped"] == [{"path": str(stuck), "reason": expected}]
    assert report["deleted_files"] == 1
    assert "skipped 1" in report["summary"]


def test_a_file_gone_before_its_turn_is_skipped_as_already_gone(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    gone = make_file(root / "gone.tmp", age_days=10)
    report = Cleaner(make_policy(), free_space=disk, hooks=FsHooks(after_scan=gone.unlink)).execute(EVERYTHING)
    assert report["skipped"] == [{"path": str(gone), "reason": "already gone"}]


def test_a_concurrent_cleanup_of_the_same_policy_waits_then_gives_up_retryably(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    import fcntl

    from remediate.errors import RetryableActionError

    make_file(root / "old.tmp", age_days=10)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cleaner = Cleaner(make_policy(), free_space=disk, lock_wait=0.1)
        with pytest.raises(RetryableActionError, match="another cleanup"):
            cleaner.execute(EVERYTHING)
        assert (root / "old.tmp").exists()
    finally:
        os.close(fd)
    assert names(cleaner.execute(EVERYTHING)) == ["old.tmp"]


def test_a_hard_linked_file_frees_nothing_in_the_prediction(root: Path, make_policy: Policy, disk: FakeDisk) -> None:
    original = make_file(root / "a.tmp", 8192, age_days=10)
    os.link(original, root / "keep.dat")
    plan = Cleaner(make_policy(patterns=["*.tmp"]), free_space=disk).plan(EVERYTHING)
    assert plan["would_delete_bytes"] == 8192
    assert plan["would_free_bytes"] == 0


# ------------------------------------------------------------------ log truncation


def _log(lines: range) -> bytes:
    return b"".join(b"line %06d of the training log\n" % i for i in lines)


def test_a_log_over_the_size_is_truncated_to_its_tail_at_a_line_start(
    root: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    content = _log(range(5000))  # 31 bytes a line
    log = make_file(root / "logs" / "train.log", data=content, age_days=0)
    small = make_file(root / "logs" / "small.log", data=_log(range(10)), age_days=0)
    policy = make_policy(
        patterns=["*.tmp"],
        truncate_logs={"patterns": ["*.log"], "over_bytes": 4096, "keep_tail_bytes": 1000},
    )
    inode = log.stat().st_ino

    plan = Cleaner(policy, free_space=disk).plan(EVERYTHING)
    assert [Path(e["path"]).name for e in plan["would_truncate"]] == ["train.log"]
    assert log.read_bytes() == content

    report = Cleaner(policy, free_space=disk).execute(EVERYTHING)

    kept = log.read_bytes()
    assert content.endswith(kept)
    assert kept.startswith(b"line ") and kept.endswith(b"line 004999 of the training log\n")
    assert len(kept) == 31 * (1000 // 31)  # whole lines only, at most keep_tail_bytes
    assert log.stat().st_ino == inode  # the same file: writers holding it open keep writing to it
    assert small.read_bytes() == _log(range(10))
    assert report["truncated"] == [{"path": str(log), "size_before": len(content), "size_after": len(kept)}]
    assert report["deleted"] == []


def test_truncation_runs_only_when_deleting_did_not_meet_the_target(root: Path, make_policy: Policy) -> None:
    old = make_file(root / "old.tmp", 64 * 1024, age_days=10)
    log = make_file(root / "app.log", data=_log(range(5000)), age_days=0)
    policy = make_policy(
        patterns=["*.tmp"], truncate_logs={"patterns": ["*.log"], "over_bytes": 4096, "keep_tail_bytes": 100}
    )
    disk = FakeDisk(root, capacity=1024 * 1024)
    enough = Target(free_bytes=disk.free + allocated(old))
    report = Cleaner(policy, free_space=disk).execute(enough)
    assert names(report) == ["old.tmp"] and report["truncated"] == []
    assert log.stat().st_size == len(_log(range(5000)))
    report = Cleaner(policy, free_space=disk).execute(EVERYTHING)
    assert [Path(t["path"]).name for t in report["truncated"]] == ["app.log"]


def test_a_log_swapped_for_a_symlink_is_not_truncated_through_it(
    root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    log = make_file(root / "app.log", data=_log(range(5000)), age_days=0)
    policy = make_policy(
        patterns=["*.tmp"], truncate_logs={"patterns": ["*.log"], "over_bytes": 100, "keep_tail_bytes": 10}
    )
    os.truncate(outside, 0)
    outside.write_bytes(b"y" * 10_000)

    def swap() -> None:
        log.unlink()
        log.symlink_to(outside)

    report = Cleaner(policy, free_space=disk, hooks=FsHooks(after_scan=swap)).execute(EVERYTHING)
    assert outside.read_bytes() == b"y" * 10_000
    assert report["truncated"] == []
    assert "symbolic link" in report["skipped"][0]["reason"]


def test_a_hard_linked_log_is_never_truncated_and_the_plan_says_so(
    root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    """Finding 13: truncation rewrote the inode, so the log's other name (here a backup outside the root) lost it."""
    content = _log(range(5000))
    log = make_file(root / "app.log", data=content, age_days=0)
    outside.unlink()
    os.link(log, outside)  # e.g. a backup tool's hard-linked snapshot of the log
    lone = make_file(root / "other.log", data=content, age_days=0)
    policy = make_policy(
        patterns=["*.tmp"], truncate_logs={"patterns": ["*.log"], "over_bytes": 100, "keep_tail_bytes": 10}
    )

    plan = Cleaner(policy, free_space=disk).plan(EVERYTHING)
    report = Cleaner(policy, free_space=disk).execute(EVERYTHING)

    assert [Path(e["path"]).name for e in plan["would_truncate"]] == ["other.log"]
    assert plan["scan"]["kept"] == {"hard_linked": 1}
    assert [Path(t["path"]).name for t in report["truncated"]] == ["other.log"]
    assert log.read_bytes() == content and outside.read_bytes() == content
    assert lone.stat().st_size < len(content)


def test_a_log_hard_linked_after_the_scan_is_left_alone_with_the_reason(
    root: Path, outside: Path, make_policy: Policy, disk: FakeDisk
) -> None:
    content = _log(range(5000))
    log = make_file(root / "app.log", data=content, age_days=0)
    policy = make_policy(
        patterns=["*.tmp"], truncate_logs={"patterns": ["*.log"], "over_bytes": 100, "keep_tail_bytes": 10}
    )
    outside.unlink()

    report = Cleaner(policy, free_space=disk, hooks=FsHooks(after_scan=lambda: os.link(log, outside))).execute(
        EVERYTHING
    )

    assert report["truncated"] == []
    assert "2 hard links" in report["skipped"][0]["reason"]
    assert outside.read_bytes() == content
