"""GET /history on a large store: p50/p99 per kind of query, on a store with 1,000,000 runs.

    .venv/bin/python bench/history.py            # builds (once, ~1 min) and reuses a 1M-run store in /tmp
    .venv/bin/python bench/history.py --quick    # 50,000 runs, 20 queries per kind, < 30 s
    .venv/bin/python bench/history.py --runs 100000             # another store size, also kept in /tmp
    .venv/bin/python bench/history.py --plans    # also each kind's index and SQLite VM instructions per page
    .venv/bin/python bench/history.py --curve --queries 100     # 10k..10M runs: docs/img/scaling-history-size.*

The store is built directly with sqlite3 `executemany` in the schema `Store.open` creates: ~280,000
notifications, ~1.1 million alerts and decisions, 1,000,000 runs over 90 days; 20 playbooks (skewed:
a few busy ones), 500 targets (skewed), 8 alertnames; runs mostly succeeded, some failed, rejected,
planned and cancelled; decisions without a run: duplicate, cooldown, attempt_cap, unmatched. No
ANALYZE (remediate never runs it). Steps are not generated: /history does not read them. The
decisions' times never decrease with the id, as remediate's SQLite store stamps them
(remediate/store/decision_time.py). The 10M-run store takes ~10 GB and many minutes to build.

Then `remediate serve` (2 sync workers) answers --queries GET /history requests per kind, one at a
time over HTTP on 127.0.0.1, with random parameter values. Prints p50/p99 per kind against the
target (p99 <= 20 ms for every kind); asserts nothing. `--curve` does so on each store size and writes
the figures (JSON) and a plot of p99 against the store size (PNG) to docs/img/.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c
import requests
import sqlalchemy as sa

from remediate.server.queries import history_query
from remediate.store import Store
from remediate.store.history import history_page

TARGET_P99_MS = 20.0
DAYS = 90
ALERTNAMES = [
    "GpuXidError",
    "GPUTemperatureHigh",
    "GpuEccErrors",
    "NodeFilesystemAlmostOutOfSpace",
    "TrainingLossSpike",
    "TrainingLossNaN",
    "NodeNotReady",
    "NcclTimeout",
]
PLAYBOOKS = [f"pb-{i:02d}-{ALERTNAMES[i % len(ALERTNAMES)].lower()}" for i in range(20)]
TARGETS = [f"node-{i:03d}" for i in range(500)]
RUN_STATUSES = [("succeeded", 0.935), ("failed", 0.04), ("rejected", 0.01), ("planned", 0.01), ("cancelled", 0.005)]
NO_RUN = [("duplicate", 0.05), ("cooldown", 0.035), ("attempt_cap", 0.01), ("unmatched", 0.005)]
STATUSES = [name for name, _ in RUN_STATUSES + NO_RUN]
"""Every status a decision has in the store: a query for any of them (the rare ones walk furthest)."""
BUILD_VERSION = 1
CURVE_RUNS = (10_000, 100_000, 1_000_000, 10_000_000)


def _weights(n: int, skew: float) -> list[float]:
    return [1 / (i + 1) ** skew for i in range(n)]


def build(
    path: Path,
    runs: int,
    seed: int = 7,
    *,
    days: float | None = None,
    targets: list[str] | None = None,
    no_run: list[tuple[str, float]] | None = None,
) -> dict[str, int]:
    """Write a store with `runs` runs (and the notifications, alerts and decisions around them) to `path`.

    `days` (DAYS), `targets` (TARGETS) and `no_run` (NO_RUN: the decisions without a run and their shares)
    shape another history with the same generator: bench/fleet_month.py's month of a 10,000-node fleet."""
    days = DAYS if days is None else days
    targets = TARGETS if targets is None else targets
    no_run = NO_RUN if no_run is None else no_run
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    Store.open(f"sqlite:///{path}").close()
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-400000")
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        " AND tbl_name IN ('alerts', 'runs', 'decisions')"
    ).fetchall()
    for name, _sql in indexes:
        conn.execute(f'DROP INDEX "{name}"')

    no_run_share = sum(w for _, w in no_run)
    decisions_total = int(runs / (1 - no_run_share))
    end = time.time() - 60
    start = end - days * 86400
    step = (end - start) / decisions_total
    # Cumulative weights, computed once: random.choices would sum 500 target weights per row (the same
    # draws either way: choices() accumulates `weights` into these).
    pb_weights = list(itertools.accumulate(_weights(len(PLAYBOOKS), 1.0)))
    target_weights = list(itertools.accumulate(_weights(len(targets), 0.6)))
    run_status_names, status_weights = zip(*RUN_STATUSES, strict=True)
    run_status_weights = list(itertools.accumulate(status_weights))
    kinds = ["run"] + [name for name, _ in no_run]
    kind_weights = list(itertools.accumulate([1 - no_run_share] + [w for _, w in no_run]))

    notifications: list[tuple[Any, ...]] = []
    alerts: list[tuple[Any, ...]] = []
    run_rows: list[tuple[Any, ...]] = []
    decisions: list[tuple[Any, ...]] = []
    run_id = notification_id = 0
    index = 0
    made_runs = 0
    while made_runs < runs:
        notification_id += 1
        received = start + index * step
        group = min(rng.randint(1, 7), runs - made_runs + 50)
        status = "resolved" if rng.random() < 0.15 else "firing"
        notifications.append(
            (notification_id, received, "remediate", status, '{}:{alertname="x"}', group, '{"version":"4"}')
        )
        for _ in range(group):
            index += 1
            alert_id = index
            created = received
            kind = rng.choices(kinds, cum_weights=kind_weights)[0] if made_runs < runs else "duplicate"
            playbook = rng.choices(PLAYBOOKS, cum_weights=pb_weights)[0]
            alertname = ALERTNAMES[PLAYBOOKS.index(playbook) % len(ALERTNAMES)]
            target = rng.choices(targets, cum_weights=target_weights)[0]
            fingerprint = f"{rng.getrandbits(64):016x}"
            # json.dumps({...}, sort_keys=True) written out: the same text, a third of the build's time less.
            labels = f'{{"Hostname": "{target}", "alertname": "{alertname}", "severity": "critical"}}'
            alerts.append(
                (
                    alert_id,
                    notification_id,
                    fingerprint,
                    alertname,
                    status,
                    "2026-01-01T00:00:00Z",
                    None,
                    labels,
                    '{"summary":"bench"}',
                    "",
                )
            )
            this_run = None
            if kind == "run":
                made_runs += 1
                run_id += 1
                this_run = run_id
                run_status = rng.choices(run_status_names, cum_weights=run_status_weights)[0]
                decision = "rejected" if run_status == "rejected" else "accepted"
                reason = f"matched playbook {playbook} ({status})"
                error = "steps[0] log: bad params" if run_status == "rejected" else None
                if run_status == "failed":
                    error = "step 0 notify (notify.webhook): HTTP 502"
                run_rows.append(
                    (
                        run_id,
                        f"{rng.getrandbits(256):064x}",
                        playbook,
                        alertname,
                        target,
                        status,
                        "dry-run" if run_status == "planned" else "enforce",
                        run_status,
                        alert_id,
                        None,
                        created,
                        created + 0.6,
                        created + 0.01,
                        created + 0.6,
                        error,
                    )
                )
                row_status = run_status
            elif kind == "unmatched":
                decision, row_status, reason, playbook, target = (
                    kind,
                    kind,
                    "no playbook matches this alert",
                    None,
                    None,
                )
            else:
                decision, row_status, reason = kind, kind, f"{kind}: see the run before"
            decisions.append(
                (
                    created,
                    notification_id,
                    alert_id,
                    alertname,
                    fingerprint,
                    status,
                    playbook,
                    target,
                    decision,
                    reason,
                    row_status,
                    this_run,
                )
            )
        if len(decisions) >= 200_000 or made_runs >= runs:
            _flush(conn, notifications, alerts, run_rows, decisions)
    for _name, sql in indexes:
        conn.execute(sql)
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('bench_history', ?)", (_build_key(runs),))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    return {"notifications": notification_id, "alerts": index, "decisions": index, "runs": run_id}


def _flush(conn: sqlite3.Connection, *tables: list[tuple[Any, ...]]) -> None:
    notifications, alerts, run_rows, decisions = tables
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO notifications (id, received_at, receiver, status, group_key, alert_count, raw) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        notifications,
    )
    conn.executemany("INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", alerts)
    conn.executemany(
        "INSERT INTO runs (id, dedupe_key, playbook, alertname, target, phase, mode, status, alert_id, after_run_id,"
        " created_at, updated_at, started_at, finished_at, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        run_rows,
    )
    conn.executemany(
        "INSERT INTO decisions (created_at, notification_id, alert_id, alertname, fingerprint, alert_status, playbook,"
        " target, decision, reason, status, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        decisions,
    )
    conn.execute("COMMIT")
    for table in tables:
        table.clear()


def _build_key(runs: int) -> str:
    return f"v{BUILD_VERSION}:{runs}"


def _schema_of(path: Path) -> dict[str, Any]:
    """Columns and indexes of each table, as the database reports them."""
    engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.pool.NullPool)
    try:
        inspector = sa.inspect(engine)
        return {
            table: (
                [column["name"] for column in inspector.get_columns(table)],
                sorted((index["name"], tuple(index["column_names"])) for index in inspector.get_indexes(table)),
            )
            for table in inspector.get_table_names()
        }
    finally:
        engine.dispose()


def _fresh_schema() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "fresh.db"
        Store.open(f"sqlite:///{fresh}").close()
        return _schema_of(fresh)


def ensure_store(path: Path, runs: int, rebuild: bool) -> tuple[bool, float]:
    """(built now?, seconds spent). A store built by an older remediate is upgraded here, as `remediate
    serve` would, so that the server's first request does not wait for the migration."""
    found = None
    if not rebuild and path.exists():
        with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(path)) as conn:
            found = conn.execute("SELECT value FROM meta WHERE key = 'bench_history'").fetchone()
        if found and found[0] == _build_key(runs):
            Store.open(f"sqlite:///{path}").close()
            if _schema_of(path) == _fresh_schema():
                return False, 0.0
            # The same schema version but another schema (a store built by a branch's code before its
            # migration was merged with others'): no upgrade would reach it, so it is built again.
            print(f"store: {path} has another schema than this remediate's: building it again")
    started = time.perf_counter()
    # Built beside it and renamed when complete: an interrupted build leaves no store that looks whole.
    building = path.with_name(path.name + ".building")
    try:
        build(building, runs)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        building.replace(path)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{building}{suffix}").unlink(missing_ok=True)
    return True, time.perf_counter() - started


def cursor_for(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"d:{last_id}".encode()).decode().rstrip("=")


def query_kinds(
    db: Path, rng: random.Random, targets: list[str] | None = None
) -> dict[str, Callable[[], dict[str, str]]]:
    """Each kind of GET /history query and a function drawing its parameters; `targets`: the nodes drawn [TARGETS]."""
    targets = TARGETS if targets is None else targets
    with contextlib.closing(sqlite3.connect(db)) as conn:
        lo, hi, max_id = conn.execute("SELECT min(created_at), max(created_at), max(id) FROM decisions").fetchone()

    def window(hours: float) -> dict[str, str]:
        since = rng.uniform(lo, hi - hours * 3600)
        return {"since": f"{since:.3f}", "until": f"{since + hours * 3600:.3f}"}

    def statuses() -> str:
        return rng.choice(STATUSES)

    def day() -> dict[str, str]:
        return {"since": f"{hi - 86400:.3f}"}

    def playbook_alertname() -> dict[str, str]:
        playbook = rng.choice(PLAYBOOKS)
        return {"playbook": playbook, "alertname": ALERTNAMES[PLAYBOOKS.index(playbook) % len(ALERTNAMES)]}

    # Each filter alone, then the combinations people use: any status (a rare one, or one that the other
    # filter never has, walks furthest), the node's failures, a playbook's or an alertname's last day, ...
    return {
        "no filter": lambda: {},
        "playbook": lambda: {"playbook": rng.choice(PLAYBOOKS)},
        "alertname": lambda: {"alertname": rng.choice(ALERTNAMES)},
        "target": lambda: {"target": rng.choice(targets)},
        "status=failed": lambda: {"status": "failed"},
        "status (any)": lambda: {"status": statuses()},
        "since/until 1 h": lambda: window(1),
        "since/until 7 d": lambda: window(24 * 7),
        "since/until 30 d": lambda: window(24 * 30),
        "since (last 24 h)": day,
        "until (any time)": lambda: {"until": f"{rng.uniform(lo, hi):.3f}"},
        "deep cursor page": lambda: {"cursor": cursor_for(rng.randint(1000, max_id // 2))},
        "playbook+status=failed": lambda: {"playbook": rng.choice(PLAYBOOKS), "status": "failed"},
        "target+status=failed": lambda: {"target": rng.choice(targets), "status": "failed"},
        "alertname+status=failed": lambda: {"alertname": rng.choice(ALERTNAMES), "status": "failed"},
        "playbook+status (any)": lambda: {"playbook": rng.choice(PLAYBOOKS), "status": statuses()},
        "target+status (any)": lambda: {"target": rng.choice(targets), "status": statuses()},
        "alertname+status (any)": lambda: {"alertname": rng.choice(ALERTNAMES), "status": statuses()},
        "playbook+target": lambda: {"playbook": rng.choice(PLAYBOOKS), "target": rng.choice(targets)},
        "alertname+target": lambda: {"alertname": rng.choice(ALERTNAMES), "target": rng.choice(targets)},
        "playbook+alertname": playbook_alertname,
        "playbook+since 24 h": lambda: {"playbook": rng.choice(PLAYBOOKS), **day()},
        "alertname+since 24 h": lambda: {"alertname": rng.choice(ALERTNAMES), **day()},
        "target+since 24 h": lambda: {"target": rng.choice(targets), **day()},
        "status (any)+since 24 h": lambda: {"status": statuses(), **day()},
        "target+since/until 7 d": lambda: {"target": rng.choice(targets), **window(24 * 7)},
        "playbook+until": lambda: {"playbook": rng.choice(PLAYBOOKS), "until": f"{rng.uniform(lo, hi):.3f}"},
        "target+status+since 7 d": lambda: {"target": rng.choice(targets), "status": statuses(), **window(24 * 7)},
        "playbook+target+status": lambda: {
            "playbook": rng.choice(PLAYBOOKS),
            "target": rng.choice(targets),
            "status": statuses(),
        },
        "playbook, deep cursor": lambda: {"playbook": rng.choice(PLAYBOOKS), "cursor": cursor_for(max_id // 10)},
        "target+status, deep cursor": lambda: {
            "target": rng.choice(targets),
            "status": statuses(),
            "cursor": cursor_for(max_id // 2),
        },
    }


def measure(
    db: Path,
    work: Path,
    *,
    queries: int,
    limit: int,
    targets: list[str] | None = None,
    database_url: str | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """`queries` sequential GET /history per kind against `remediate serve` on `db`: (timings ms, entries/page).

    `database_url`: the server stores there instead (a PostgreSQL copy of `db`: the same ids and times, so the
    parameters drawn from `db` fit it)."""
    rng = random.Random(11)
    kinds = query_kinds(db, rng, targets)
    headers = {"Authorization": f"Bearer {c.TOKEN}"}
    results: dict[str, list[float]] = {}
    sizes: dict[str, list[int]] = {}
    # Retention off: the store's 90 days end when it was built, and a server on a store built days ago
    # would otherwise prune the days past its 90-day retention while the queries are measured.
    with c.remediate_server(work, db=db, extra_env={"REMEDIATE_RETENTION": "off"}, database_url=database_url) as server:
        session = requests.Session()
        for _ in range(5):  # warm both workers' connections and the page cache a little
            session.get(server.url + "/history", headers=headers, timeout=30)
        for name, params in kinds.items():
            timings, entries = [], []
            for _ in range(queries):
                query = {**params(), "limit": str(limit)}
                started = time.perf_counter()
                response = session.get(server.url + "/history", params=query, headers=headers, timeout=60)
                timings.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    print(f"  {name}: HTTP {response.status_code} {response.text[:200]}")
                    break
                entries.append(len(response.json()["entries"]))
            results[name], sizes[name] = timings, entries
    return results, sizes


def measure_plans(db: Path, *, queries: int, limit: int) -> None:
    """In-process, the same kinds and parameter values: the index each page's statement uses (EXPLAIN QUERY
    PLAN) and the SQLite VM instructions it runs (a progress handler's count): work, not time, so the
    figures do not move with the machine's load."""
    rng = random.Random(11)
    kinds = query_kinds(db, rng)
    store = Store.open(f"sqlite:///{db}")
    print()
    print("  in-process, SQLite VM instructions per page (thousands) and the index of the page's ids")
    print("  query                         kVM p50  kVM p99  kVM max   index (EXPLAIN QUERY PLAN)")
    try:
        with store.read() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            ticks = [0]
            sent: list[tuple[str, Any]] = []

            def tick() -> int:
                ticks[0] += 1
                return 0  # go on

            def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
                sent.append((statement, parameters))

            for name, params in kinds.items():
                counts = []
                for _ in range(queries):
                    query = history_query({**params(), "limit": str(limit)})
                    ticks[0] = 0
                    raw.set_progress_handler(tick, 1000)
                    history_page(conn, query, time_follows_id=True)
                    raw.set_progress_handler(None, 0)
                    counts.append(ticks[0])
                sa.event.listen(conn.engine, "before_cursor_execute", record)
                history_page(conn, query, time_follows_id=True)
                sa.event.remove(conn.engine, "before_cursor_execute", record)
                statement, parameters = sent.pop()
                plan = [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)]
                pages = [step for step in plan if "(rowid=?)" not in step and "created_at" not in step]
                index = next((step for step in pages if step.startswith(("SEARCH decisions", "SCAN decisions"))), "")
                index = index.replace("SEARCH decisions USING ", "").replace("SCAN decisions", "primary key, backwards")
                print(
                    f"  {name:28} {c.percentile(counts, 50):8} {c.percentile(counts, 99):8} {max(counts):8}   {index}"
                )
    finally:
        store.close()


def describe(db: Path, built: bool, seconds: float) -> dict[str, Any]:
    """Print and return what the store holds."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        counts = {
            table: conn.execute(f"SELECT max(id) FROM {table}").fetchone()[0]  # noqa: S608 - fixed names
            for table in ("runs", "decisions", "alerts")
        }
    size = db.stat().st_size / 2**20
    how = f"built in {seconds:.0f} s" if built else "reused"
    print(
        f"store: {db} ({size:.0f} MiB; {counts['runs']:,} runs, {counts['decisions']:,} decisions, "
        f"{counts['alerts']:,} alerts; {how})"
    )
    return {**counts, "mib": round(size)}


def print_table(results: dict[str, list[float]], sizes: dict[str, list[int]]) -> None:
    print()
    print("  query                          p50 ms   p99 ms   max ms   entries/page (mean)")
    misses = []
    for name, timings in results.items():
        p99 = c.percentile(timings, 99)
        if p99 > TARGET_P99_MS:
            misses.append(name)
        mean_entries = sum(sizes[name]) / max(1, len(sizes[name]))
        print(
            f"  {name:28} {c.percentile(timings, 50):8.1f} {p99:8.1f} {max(timings):8.1f}   {mean_entries:6.1f}"
            f"{'   MISSES' if p99 > TARGET_P99_MS else ''}"
        )
    verdict = "met by every kind" if not misses else "missed by " + ", ".join(misses)
    print(f"  target p99 <= {TARGET_P99_MS:.0f} ms: {verdict}")


def store_path(runs: int, directory: Path = Path("/tmp")) -> Path:
    """The store kept for reuse (the 1M-run one in /tmp: bench/ui.py and bench/report.py read it too)."""
    return directory / f"remediate-bench-history-{runs}.db"


def curve(args: argparse.Namespace, work: Path) -> None:
    """p50/p99 per kind on each store size: the JSON of the figures and a PNG plot in --out."""
    import matplotlib  # the `bench` extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures: dict[str, Any] = {
        "machine": c.machine_line(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "queries_per_kind": args.queries,
        "limit": args.limit,
        "target_p99_ms": TARGET_P99_MS,
        "stores": [],
    }
    for runs in args.curve_runs:
        db = store_path(runs, args.store_dir)
        built, seconds = ensure_store(db, runs, args.rebuild)
        store = describe(db, built, seconds)
        load_before = os.getloadavg()[0]
        results, sizes = measure(db, work, queries=args.queries, limit=args.limit)
        print_table(results, sizes)
        figures["stores"].append(
            {
                "runs": runs,
                "store": store,
                "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "kinds": {
                    name: {
                        "p50_ms": round(c.percentile(timings, 50), 2),
                        "p99_ms": round(c.percentile(timings, 99), 2),
                        "max_ms": round(max(timings), 2),
                    }
                    for name, timings in results.items()
                },
            }
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling-history-size.json").write_text(json.dumps(figures, indent=2) + "\n")
    runs_axis = [entry["runs"] for entry in figures["stores"]]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colours = plt.get_cmap("tab20").colors
    for number, name in enumerate(figures["stores"][0]["kinds"]):
        ax.plot(
            runs_axis,
            [entry["kinds"][name]["p99_ms"] for entry in figures["stores"]],
            marker="os^D"[number % 4],
            linestyle="--" if ("since" in name or "until" in name) else "-",  # the time filters
            color=colours[number % len(colours)],
            label=name,
        )
    ax.axhline(TARGET_P99_MS, color="black", linestyle="--", linewidth=1, label=f"target p99 {TARGET_P99_MS:.0f} ms")
    ax.set_xscale("log")
    ax.set_xlabel("runs in the store")
    ax.set_ylabel("GET /history p99 (ms)")
    loads = [load for entry in figures["stores"] for load in entry["load_average"]]
    ax.set_title(
        f"GET /history p99 per query kind, limit {args.limit}, {args.queries} queries per kind\n"
        f"{figures['machine']}; load average {min(loads):.1f}-{max(loads):.1f}",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / "scaling-history-size.png", dpi=110)
    print(f"wrote {args.out / 'scaling-history-size.json'} and {args.out / 'scaling-history-size.png'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="50,000 runs and 20 queries per kind (< 30 s)")
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs in the store [1000000]")
    parser.add_argument("--queries", type=int, default=200, help="queries per kind [200]")
    parser.add_argument("--limit", type=int, default=50, help="page size (limit=) [50, the API default]")
    parser.add_argument(
        "--db",
        type=Path,
        help="store file [/tmp/remediate-bench-history-<runs>.db, kept for reuse; --quick: a temporary one]",
    )
    parser.add_argument("--rebuild", action="store_true", help="build the store even if --db already holds one")
    parser.add_argument(
        "--plans",
        action="store_true",
        help="also, in-process: each kind's index (EXPLAIN QUERY PLAN) and SQLite VM instructions per page, "
        "figures that do not move with the machine's load",
    )
    parser.add_argument(
        "--curve",
        action="store_true",
        help="measure every store size of --curve-runs (each built once in /tmp) and write the figures "
        "and a plot to --out (needs matplotlib: the `bench` extra)",
    )
    parser.add_argument(
        "--curve-runs",
        type=lambda text: [int(n) for n in text.split(",")],
        default=list(CURVE_RUNS),
        help=f"store sizes of --curve [{','.join(map(str, CURVE_RUNS))}]",
    )
    parser.add_argument(
        "--store-dir", type=Path, default=Path("/tmp"), help="where the stores are kept for reuse [/tmp]"
    )
    parser.add_argument("--out", type=Path, default=c.REPO / "docs" / "img", help="where --curve writes [docs/img]")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = min(args.runs, 50_000)
        args.queries = min(args.queries, 20)
    with c.workspace() as work:
        print(f"machine: {c.machine_line()}; load average before: {os.getloadavg()[0]:.2f}")
        if args.curve:
            curve(args, work)
            print(f"load average after: {os.getloadavg()[0]:.2f}")
            return 0
        # --quick builds a small store in the scratch directory; the full one is kept in /tmp for reuse.
        db = args.db or (work / "history.db" if args.quick else store_path(args.runs, args.store_dir))
        built, seconds = ensure_store(db, args.runs, args.rebuild)
        describe(db, built, seconds)
        print(
            f"settings: remediate serve, 2 sync workers; {args.queries} sequential GET /history per kind, "
            f"limit {args.limit}"
        )
        results, sizes = measure(db, work, queries=args.queries, limit=args.limit)
        print_table(results, sizes)
        if args.plans:
            measure_plans(db, queries=args.queries, limit=args.limit)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
