"""Sink checks: does each configured sink's URL answer? A HEAD request (the sink's own headers_file sent with it,
so an auth proxy answers as it would to a notification): any HTTP status means the sink answered, since Slack
and Teams answer a HEAD with 4xx and a small receiver with 501 (no HEAD); 502/503/504 (a proxy whose backend is
down) is a warning; not reached, or a URL that cannot be read, fails. Never a POST: a check must not notify anyone."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from remediate.config.values import Sink
from remediate.doctor.model import Check, fail, ok, warn
from remediate.doctor.probe import Probe, ProbeError
from remediate.errors import RemediateError

FAMILY = "sinks"
GATEWAY_DOWN = frozenset({502, 503, 504})


def check_sinks(probe: Probe, sinks: Iterable[Sink], used: Iterable[str]) -> list[Check]:
    sinks, used = list(sinks), set(used)
    checks = [_check_sink(probe, sink) for sink in sinks]
    known = {sink.name for sink in sinks}
    checks.extend(
        fail(
            FAMILY,
            f"sinks: {name}",
            "a notify step names it but it is not configured",
            f"add sinks.{name} (settings file or REMEDIATE_SINKS)",
        )
        for name in sorted(used - known)
    )
    return checks


def _check_sink(probe: Probe, sink: Sink) -> Check:
    name = f"sinks: {sink.name}"
    try:
        url = sink.url or Path(sink.url_file or "").read_text(encoding="utf-8").strip()
    except OSError as exc:
        return fail(FAMILY, name, f"cannot read url_file {sink.url_file}: {exc.strerror}", "mount the sink's Secret")
    if not url:
        return fail(FAMILY, name, "no URL", f"set sinks.{sink.name}.url or url_file")
    headers: dict[str, str] = {}
    if sink.headers_file:
        from remediate.actions.notify import read_headers_file

        try:
            headers = read_headers_file(sink.headers_file)
        except RemediateError as exc:
            return fail(FAMILY, name, str(exc), "fix the sink's headers_file")
    try:
        status = probe.status(url, headers)
    except ProbeError as exc:
        return fail(FAMILY, name, f"{sink.type}: not reached: {exc}", "check the sink's URL and the egress to it")
    if status in GATEWAY_DOWN:
        return warn(FAMILY, name, f"{sink.type}: answers HTTP {status} to HEAD", "check the sink's service")
    return ok(FAMILY, name, f"{sink.type}: answers (HTTP {status} to HEAD; nothing sent)")
