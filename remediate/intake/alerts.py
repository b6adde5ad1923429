"""AlertManager v4 webhook payload -> typed, validated ``Notification`` and ``Alert`` objects.

The server's ``/webhook`` handler decodes the JSON body and calls ``parse_notification``; a
``PayloadError`` becomes a 400 naming the offending field (``alerts[2].labels.alertname``,
``alerts[0].startsAt``, ...). Everything downstream (playbook matching, guards, the store) only
ever sees the frozen objects built here. Pure logic, no I/O.

Validation is strict about what remediate relies on and lenient about the rest:

* ``version`` must be "4", ``status`` firing|resolved, ``alerts`` a non-empty array; each alert
  needs a status, labels with a non-empty ``alertname``, ``startsAt`` and a ``fingerprint``.
* Fields AlertManager always sends but remediate does not need (``groupKey``, ``receiver``,
  ``externalURL``, ``groupLabels``, ...) default to empty when absent or null, and must have the
  right type when present.
* ``notification_reason`` (AlertManager 0.32+, snake_case unlike the rest) is kept, cut to
  ``MAX_REASON_LENGTH``: why AlertManager sent it (remediate.intake.reason); "" from older ones.
* Unknown fields anywhere are ignored: newer AlertManagers add some (``routeLabels``, ...), and
  rejecting them would make AlertManager re-send forever.
* Whatever ``json.loads`` can produce, the only exception that leaves this module is
  ``PayloadError``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Final

from remediate.errors import PayloadError
from remediate.intake.alertref import AlertRef
from remediate.intake.reason import MAX_REASON_LENGTH

SUPPORTED_VERSION: Final = "4"
STATUSES: Final = frozenset({"firing", "resolved"})

# Bounds on what one alert may make us store; the request body limit bounds the rest.
MAX_LABELS: Final = 256
MAX_LABEL_LENGTH: Final = 4096
MAX_FINGERPRINT_LENGTH: Final = 64
# Alert names are rule names; the store indexes them (PostgreSQL b-tree rows must stay small).
MAX_ALERTNAME_LENGTH: Final = 255

# Prometheus label names (AlertManager 0.25 validates the same pattern).
LABEL_NAME_PATTERN: Final = r"[a-zA-Z_][a-zA-Z0-9_]*"
_LABEL_NAME: Final = re.compile(LABEL_NAME_PATTERN)

# RFC 3339 as AlertManager (Go's RFC3339Nano) writes it: up to 9 fractional digits, which
# datetime.fromisoformat rejects. [0-9] rather than \d: \d also matches non-ASCII digits.
_TIMESTAMP: Final = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})[Tt]"
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?:\.(?P<fraction>[0-9]{1,9}))?"
    r"(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})"
)

# Go's zero time.Time, which AlertManager sends as endsAt of a firing alert.
_ZERO_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)

# Lone surrogates survive json.loads ("\ud800") but cannot be encoded as UTF-8, so the store
# would fail on them later; refuse them here, where the error can name the field.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")

# Long keys and values are cut short in error messages: they go back in the HTTP response.
_SHOW_LIMIT: Final = 64


@dataclass(frozen=True)
class Alert:
    """One validated alert of a notification."""

    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime | None
    generator_url: str
    fingerprint: str
    # The exact strings received: fingerprint + starts_at_raw identify one occurrence of an
    # alert, and re-formatting the parsed time would lose the nanoseconds.
    starts_at_raw: str
    ends_at_raw: str = ""

    # Plain properties: a first access of a cached_property takes a lock (Python 3.11), costlier than these.
    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def starts_at_text(self) -> str:
        """startsAt as the store keeps it (format_timestamp, cached); with the fingerprint, an occurrence."""
        return format_timestamp(self.starts_at)

    def template_context(self) -> dict[str, object]:
        """What playbook templates see; fresh copies, so a template cannot change the alert."""
        ends_at = self.ends_at_raw
        if not ends_at and self.ends_at is not None:
            ends_at = format_timestamp(self.ends_at)
        return {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "status": self.status,
            "fingerprint": self.fingerprint,
            "startsAt": self.starts_at_raw,
            "endsAt": ends_at,
            "generatorURL": self.generator_url,
            "alertname": self.name,
        }


@dataclass(frozen=True)
class Notification:
    """One validated webhook body: a group of alerts."""

    version: str
    group_key: str
    truncated_alerts: int
    status: str
    receiver: str
    group_labels: Mapping[str, str]
    common_labels: Mapping[str, str]
    common_annotations: Mapping[str, str]
    external_url: str
    alerts: tuple[Alert, ...]
    notification_reason: str = ""
    """Why AlertManager sent it (0.32+: "repeat interval elapsed", ...; remediate.intake.reason); "" when not said."""


def parse_notification(data: object) -> Notification:
    """Validate a decoded webhook body; raise ``PayloadError`` naming the first bad field."""
    if not isinstance(data, Mapping):
        raise PayloadError("", f"the payload must be a JSON object, got {_json_type(data)}")
    _check_keys(data, "")

    version = data.get("version")
    if version is None:
        raise PayloadError("version", f'is required; expected "{SUPPORTED_VERSION}"')
    if not isinstance(version, str):
        raise PayloadError("version", f'must be the string "{SUPPORTED_VERSION}", got {_json_type(version)}')
    if version != SUPPORTED_VERSION:
        raise PayloadError(
            "version",
            f'got {_show(version)}; only AlertManager webhook version "{SUPPORTED_VERSION}" is supported',
        )

    status = _status(data, "")

    raw_alerts = data.get("alerts")
    if raw_alerts is None:
        raise PayloadError("alerts", "is required")
    if not isinstance(raw_alerts, list):
        raise PayloadError("alerts", f"must be an array, got {_json_type(raw_alerts)}")
    if not raw_alerts:
        raise PayloadError("alerts", "must contain at least one alert")

    truncated = data.get("truncatedAlerts")
    if truncated is None:
        truncated = 0
    elif isinstance(truncated, bool) or not isinstance(truncated, int):
        raise PayloadError("truncatedAlerts", f"must be a non-negative integer, got {_json_type(truncated)}")
    elif truncated < 0:
        raise PayloadError("truncatedAlerts", "must not be negative")

    return Notification(
        version=version,
        group_key=_string(data, "groupKey", "", required=False),
        truncated_alerts=truncated,
        status=status,
        receiver=_string(data, "receiver", "", required=False),
        group_labels=MappingProxyType(_string_map(data, "groupLabels", "", required=False, labels=True)),
        common_labels=MappingProxyType(_string_map(data, "commonLabels", "", required=False, labels=True)),
        common_annotations=MappingProxyType(_string_map(data, "commonAnnotations", "", required=False, labels=False)),
        external_url=_string(data, "externalURL", "", required=False),
        alerts=tuple(_parse_alert(raw, index) for index, raw in enumerate(raw_alerts)),
        notification_reason=_string(data, "notification_reason", "", required=False)[:MAX_REASON_LENGTH],
    )


def parse_timestamp(value: str, field: str) -> datetime:
    """Parse an RFC 3339 timestamp (0-9 fractional digits, Z or ±hh:mm) into an aware UTC datetime.

    Fractions beyond microseconds are truncated (datetime cannot hold nanoseconds); keep the raw
    string where the exact value matters.
    """
    if not isinstance(value, str):
        raise PayloadError(field, f"must be an RFC 3339 timestamp string, got {_json_type(value)}")
    try:
        return _parse_timestamp(value)
    except _InvalidTimestamp as exc:
        raise PayloadError(field, str(exc)) from None


class _InvalidTimestamp(ValueError):
    """What is wrong with a timestamp; parse_timestamp names the field."""


@functools.lru_cache(maxsize=4096)
def _parse_timestamp(value: str) -> datetime:
    # Cached (a pure function of the string): the alerts of one storm share a few startsAt/endsAt values.
    match = _TIMESTAMP.fullmatch(value)
    if match is None:
        raise _InvalidTimestamp(f"is not an RFC 3339 timestamp: {_show(value)}")
    try:
        offset = match["offset"]
        if offset in ("Z", "z"):
            tz = UTC
        else:
            hours, minutes = int(offset[1:3]), int(offset[4:6])
            if minutes > 59:
                raise ValueError("offset minutes must be in 0..59")
            delta = timedelta(hours=hours, minutes=minutes)
            tz = timezone(-delta if offset[0] == "-" else delta)  # ValueError from 24:00 on
        moment = datetime(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"]),
            int((match["fraction"] or "")[:6].ljust(6, "0")),
            tzinfo=tz,
        )
        # OverflowError when the offset pushes the instant out of years 1..9999.
        return moment.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise _InvalidTimestamp(f"is not a valid timestamp: {_show(value)} ({exc})") from None


@functools.lru_cache(maxsize=4096)
def format_timestamp(dt: datetime) -> str:
    """Format an aware datetime as RFC 3339 in UTC with a Z, trailing fractional zeros dropped."""
    # Cached: the text depends on the instant alone, and equal aware datetimes are the same instant
    # (whatever their offsets); the alerts of one storm share a few startsAt values.
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("format_timestamp needs a timezone-aware datetime")
    utc = dt.astimezone(UTC)
    fraction = f".{utc.microsecond:06d}".rstrip("0") if utc.microsecond else ""
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}{fraction}Z"


def _parse_alert(raw: object, index: int) -> Alert:
    path = f"alerts[{index}]"
    if not isinstance(raw, Mapping):
        raise PayloadError(path, f"must be an object, got {_json_type(raw)}")
    _check_keys(raw, path)

    status = _status(raw, path)

    labels = _string_map(raw, "labels", path, required=True, labels=True)
    if not labels.get("alertname"):
        raise PayloadError(f"{path}.labels.alertname", "is required and must not be empty")
    if len(labels["alertname"]) > MAX_ALERTNAME_LENGTH:
        raise PayloadError(f"{path}.labels.alertname", f"is longer than {MAX_ALERTNAME_LENGTH} characters")
    annotations = _string_map(raw, "annotations", path, required=False, labels=False)

    starts_at_raw = _string(raw, "startsAt", path, required=True)
    starts_at = parse_timestamp(starts_at_raw, f"{path}.startsAt")

    ends_at_raw = _string(raw, "endsAt", path, required=False)
    ends_at = None
    if ends_at_raw:
        ends_at = parse_timestamp(ends_at_raw, f"{path}.endsAt")
        if ends_at == _ZERO_TIME:
            # Go's zero time: AlertManager's way of saying "no end yet".
            ends_at, ends_at_raw = None, ""

    fingerprint = _string(raw, "fingerprint", path, required=True)
    if not fingerprint:
        raise PayloadError(f"{path}.fingerprint", "must not be empty")
    if len(fingerprint) > MAX_FINGERPRINT_LENGTH:
        raise PayloadError(
            f"{path}.fingerprint",
            f"is {len(fingerprint)} characters long; at most {MAX_FINGERPRINT_LENGTH} are accepted",
        )

    return Alert(
        status=status,
        labels=MappingProxyType(labels),
        annotations=MappingProxyType(annotations),
        starts_at=starts_at,
        ends_at=ends_at,
        generator_url=_string(raw, "generatorURL", path, required=False),
        fingerprint=fingerprint,
        starts_at_raw=starts_at_raw,
        ends_at_raw=ends_at_raw,
    )


def _check_keys(obj: Mapping[object, object], path: str) -> None:
    # json.loads only makes str keys, but a caller may hand us a dict built in Python.
    try:
        "".join(obj)  # type: ignore[arg-type]  # all strings: checked in C, the usual answer
        return
    except TypeError:
        pass
    for key in obj:
        if not isinstance(key, str):
            raise PayloadError(path, f"object keys must be strings, got {_json_type(key)}")


def _status(obj: Mapping[str, object], parent: str) -> str:
    field = _join(parent, "status")
    value = obj.get("status")
    if value is None:
        raise PayloadError(field, 'is required; expected "firing" or "resolved"')
    if not isinstance(value, str):
        raise PayloadError(field, f'must be "firing" or "resolved", got {_json_type(value)}')
    if value not in STATUSES:
        raise PayloadError(field, f'must be "firing" or "resolved", got {_show(value)}')
    return value


def _string(obj: Mapping[str, object], key: str, parent: str, *, required: bool) -> str:
    # null counts as absent: other senders of this format write null where Go writes nothing.
    value = obj.get(key)
    if isinstance(value, str) and value.isascii() and "\x00" not in value:
        return value  # the common case; the field's path is built only to name a problem
    field = _join(parent, key)
    if value is None:
        if required:
            raise PayloadError(field, "is required")
        return ""
    if not isinstance(value, str):
        raise PayloadError(field, f"must be a string, got {_json_type(value)}")
    _check_unicode(value, field)
    return value


def _string_map(obj: Mapping[str, object], key: str, parent: str, *, required: bool, labels: bool) -> dict[str, str]:
    """A new dict of the map's strings: nobody else holds it, so a MappingProxyType of it is frozen."""
    value = obj.get(key)
    if type(value) is dict and _plain_strings(value, labels=labels):
        return dict(value)  # the common case; anything else takes the checks below, which name the field
    field = _join(parent, key)
    if value is None:
        if required:
            raise PayloadError(field, "is required")
        return {}
    if not isinstance(value, Mapping):
        raise PayloadError(field, f"must be an object of strings, got {_json_type(value)}")
    _check_keys(value, field)
    if labels and len(value) > MAX_LABELS:
        raise PayloadError(field, f"has {len(value)} labels; at most {MAX_LABELS} are accepted")
    result: dict[str, str] = {}
    for name, item in value.items():
        item_field = _join(field, name)
        _check_unicode(name, item_field)
        if labels:
            if len(name) > MAX_LABEL_LENGTH:
                raise PayloadError(item_field, f"label name is {len(name)} characters long; at most {MAX_LABEL_LENGTH}")
            if not _LABEL_NAME.fullmatch(name):
                raise PayloadError(
                    item_field, f"{_show(name)} is not a valid label name (must match {LABEL_NAME_PATTERN})"
                )
        if not isinstance(item, str):
            raise PayloadError(item_field, f"must be a string, got {_json_type(item)}")
        if labels and len(item) > MAX_LABEL_LENGTH:
            raise PayloadError(
                item_field, f"value is {len(item)} characters long; at most {MAX_LABEL_LENGTH} are accepted"
            )
        _check_unicode(item, item_field)
        result[name] = item
    return result


_VALID_NAME_SETS: set[tuple[str, ...]] = set()
"""Label names (in order) of maps seen valid: the alerts of a notification, and of a cluster, share a few."""
_VALID_NAME_SETS_MAX: Final = 4096


def _plain_strings(value: dict[str, object], *, labels: bool) -> bool:
    """Whether a map is all ASCII strings (labels: at most MAX_LABELS, valid names, names and values within
    MAX_LABEL_LENGTH), checked in C where it can be: true for nearly every alert, whose map then needs
    none of _string_map's checks one by one."""
    try:
        text = "".join(value) + "".join(value.values())  # type: ignore[arg-type]
    except TypeError:  # a name or value that is not a string
        return False
    if not text.isascii() or "\x00" in text:
        return False
    if not labels:
        return True
    if len(value) > MAX_LABELS or (value and max(map(len, value.values())) > MAX_LABEL_LENGTH):  # type: ignore[arg-type]
        return False
    names = tuple(value)
    if names in _VALID_NAME_SETS:
        return True
    if not all(len(name) <= MAX_LABEL_LENGTH and _LABEL_NAME.fullmatch(name) for name in names):
        return False
    if len(_VALID_NAME_SETS) < _VALID_NAME_SETS_MAX:  # bounded: label names come from senders
        _VALID_NAME_SETS.add(names)
    return True


def _check_unicode(value: str, field: str) -> None:
    # isascii() is O(1) in CPython (the string's kind is known): most strings need no search.
    if not value.isascii() and _SURROGATE.search(value):
        raise PayloadError(field, "contains a lone UTF-16 surrogate, which is not valid Unicode text")
    # JSON may carry U+0000, but no PostgreSQL text column stores it: refused here, every store alike, rather
    # than a 503 that AlertManager would retry for ever.
    if "\x00" in value:
        raise PayloadError(field, "contains the NUL character (U+0000), which remediate does not store")


def _join(parent: str, key: str) -> str:
    # JSON-path-like: alerts[0].labels.severity, or alerts[0].labels["odd key"] when the key is
    # not a plain identifier (so the path stays unambiguous).
    if _LABEL_NAME.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{_show(key)}]"


def _show(value: str) -> str:
    """A JSON-quoted, length-capped rendering of a received string, for error messages."""
    if len(value) > _SHOW_LIMIT:
        value = value[:_SHOW_LIMIT] + "..."
    return json.dumps(value)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is a subclass of int
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def alert_ref(context: Mapping[str, object]) -> AlertRef:
    """The alert as a step sees it, from its mapping shape (`AlertRef.as_mapping`: a run's stored alert,
    an agent's step request). Lenient: a missing or mistyped field is empty, an unreadable startsAt None."""

    def text(name: str) -> str:
        value = context.get(name)
        return "" if value is None else str(value)

    def mapping(name: str) -> Mapping[str, str]:
        value = context.get(name)
        return value if isinstance(value, Mapping) else {}

    starts_at_text = text("startsAt")
    try:
        starts_at = parse_timestamp(starts_at_text, "startsAt").timestamp() if starts_at_text else None
    except PayloadError:
        starts_at = None
    return AlertRef(
        alertname=text("alertname"),
        status=text("status"),
        fingerprint=text("fingerprint"),
        labels=mapping("labels"),
        annotations=mapping("annotations"),
        starts_at=starts_at,
        starts_at_text=starts_at_text,
        ends_at_text=text("endsAt"),
        generator_url=text("generatorURL"),
    )
