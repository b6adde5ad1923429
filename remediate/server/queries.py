"""The query strings of GET /history and GET /report, parsed into the store's queries (ValueError, naming
the parameter, on a bad one). The pages' history form and `remediate history` / `remediate report` parse
with the same functions, so every way in accepts the same filters."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from remediate.config.durations import parse_duration
from remediate.errors import PayloadError
from remediate.intake.alerts import parse_timestamp
from remediate.playbooks.model import Playbook
from remediate.store import HistoryQuery, RepeatRule, ReportQuery

MAX_HISTORY_LIMIT = 1000
DEFAULT_REPORT_SINCE = "7d"


def history_query(args: Mapping[str, str]) -> HistoryQuery:
    known = {"playbook", "alertname", "target", "node", "status", "since", "until", "limit", "cursor"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"unknown query parameter {unknown[0]!r} (known: {', '.join(sorted(known))})")
    limit_text = args.get("limit", "50")
    try:
        limit = int(limit_text)
    except ValueError:
        raise ValueError(f"limit must be a whole number, got {limit_text!r}") from None
    if not 1 <= limit <= MAX_HISTORY_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_HISTORY_LIMIT}")
    return HistoryQuery(
        playbook=args.get("playbook") or None,
        alertname=args.get("alertname") or None,
        target=args.get("target") or args.get("node") or None,
        status=args.get("status") or None,
        since=parse_time_arg(args.get("since"), "since"),
        until=parse_time_arg(args.get("until"), "until"),
        limit=limit,
        cursor=args.get("cursor") or None,
    )


def report_query(
    args: Mapping[str, str], job_labels: Sequence[str], *, now: float, playbooks: Iterable[Playbook] = ()
) -> ReportQuery:
    """GET /report's (and `remediate report`'s) window: `since` a duration back from `until` (7d, the
    default) or a time (RFC 3339, UNIX seconds); `until` a time, default now. The repeat offenders are
    those of `playbooks`' rules."""
    unknown = sorted(set(args) - {"since", "until"})
    if unknown:
        raise ValueError(f"unknown query parameter {unknown[0]!r} (known: since, until)")
    until = parse_time_arg(args.get("until"), "until", now=now) or now
    since = parse_time_arg(args.get("since") or DEFAULT_REPORT_SINCE, "since", now=until)
    assert since is not None
    if since >= until:
        raise ValueError("since must be before until")
    return ReportQuery(since=since, until=until, job_labels=tuple(job_labels), repeat_rules=repeat_rules(playbooks))


def repeat_rules(playbooks: Iterable[Playbook]) -> tuple[RepeatRule, ...]:
    """The `repeat_offender` rules of the loaded playbooks, as the store counts them."""
    return tuple(
        RepeatRule(p.name, p.repeat_offender.count, p.repeat_offender.within.total_seconds(), p.repeat_offender.then)
        for p in playbooks
        if p.repeat_offender is not None
    )


def parse_time_arg(value: str | None, name: str, *, now: float | None = None) -> float | None:
    """A time as every `since`/`until` takes it (GET /history, GET /report, the pages' history form and the
    CLI): UNIX seconds, an RFC 3339 time, or a duration back from `now` (1h, 7d: `now` defaults to the clock;
    GET /report's `since` counts back from its `until`)."""
    if not value:
        return None
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        back = parse_duration(text).total_seconds()
    except ValueError:
        pass
    else:
        return (time.time() if now is None else now) - back
    try:
        return parse_timestamp(text, name).timestamp()
    except PayloadError:
        raise ValueError(
            f"{name} must be a duration back from now (1h, 7d), an RFC 3339 time (2026-11-21T05:40:14Z) or UNIX seconds"
        ) from None
