"""The pure part: selection order and the stop rules, on FileInfo records (no filesystem)."""

from __future__ import annotations

from remediate.disk.policy import parse_policy
from remediate.disk.selection import Done, FileInfo, Item, Limits, run_budget, select

NOW = 1_800_000_000.0
DAY = 86400


def info(name: str, age_days: float, size: int = 100, rel_dir: str = "", root: str = "/r", nlink: int = 1) -> FileInfo:
    return FileInfo(
        root=root,
        rel_dir=rel_dir,
        name=name,
        size=size,
        allocated=size,
        mtime_ns=int((NOW - age_days * DAY) * 1e9),
        dev=1,
        ino=abs(hash((root, rel_dir, name))),
        nlink=nlink,
    )


POLICY = parse_policy(
    {"name": "p", "mountpoint": "/", "roots": ["/r", "/s"], "patterns": ["*.tmp"], "min_age": "1d", "keep_newest": 1}
)


def ok(item: Item) -> Done:
    return Done(item, ok=True, removed=item.removes, freed=item.frees)


def test_candidates_are_ordered_oldest_first_across_roots_and_directories() -> None:
    files = [
        info("a.tmp", 5, rel_dir="x"),
        info("b.tmp", 9, rel_dir="x"),
        info("c.tmp", 7, root="/s"),
        info("d.tmp", 8, root="/s"),
        info("e.tmp", 1, root="/s", rel_dir="y"),  # newest of its directory: kept
        info("f.txt", 99),
    ]
    chosen = select(files, POLICY, now=NOW)
    assert [i.file.name for i in chosen.deletions] == ["b.tmp", "d.tmp"]
    assert chosen.kept == {"keep_newest": 3}
    assert chosen.matched == 5


def test_min_age_is_measured_from_the_last_modification() -> None:
    policy = parse_policy({"name": "p", "mountpoint": "/", "roots": ["/r"], "patterns": ["*"], "min_age": "2d"})
    chosen = select([info("old", 2.01), info("young", 1.99)], policy, now=NOW)
    assert [i.file.name for i in chosen.deletions] == ["old"]
    assert chosen.kept == {"too_young": 1}


def test_skipped_files_cost_nothing_against_the_caps() -> None:
    items = [Item("delete", info(f"f{i}", 10 - i)) for i in range(5)]

    def act(item: Item) -> Done:
        return Done(item, ok=False, reason="nope") if item.file.name in ("f0", "f1") else ok(item)

    result = run_budget(items, free_before=0, limits=Limits(target_free=10**9, max_files=2), act=act)
    assert [d.item.file.name for d in result.done] == ["f2", "f3"]
    assert [d.item.file.name for d in result.skipped] == ["f0", "f1"]
    assert result.stopped_by == "max_files"


def test_a_measured_free_space_that_reaches_the_target_stops_the_run_early() -> None:
    items = [Item("delete", info(f"f{i}", 10 - i)) for i in range(5)]
    readings = iter([0, 0, 5000, 5000])
    result = run_budget(items, free_before=0, limits=Limits(target_free=5000), act=ok, measure=lambda: next(readings))
    assert len(result.done) == 2
    assert result.stopped_by == "target_met"


def test_the_deadline_stops_the_run_between_files() -> None:
    items = [Item("delete", info(f"f{i}", 10 - i)) for i in range(5)]
    calls = iter([False, False, True])
    result = run_budget(items, free_before=0, limits=Limits(target_free=10**9), act=ok, expired=lambda: next(calls))
    assert len(result.done) == 2
    assert result.stopped_by == "deadline"


def test_a_hard_linked_file_is_predicted_to_free_nothing() -> None:
    assert Item("delete", info("a", 5, size=4096, nlink=2)).frees == 0
    assert Item("delete", info("a", 5, size=4096)).frees == 4096
    assert Item("truncate", info("a", 5, size=4096), keep_bytes=1024).removes == 3072
