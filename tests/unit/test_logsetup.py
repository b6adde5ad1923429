"""The one logging set-up (remediate.logs.setup) and audit events (remediate.logs.audit): text and JSON
formats, structured fields, levels, the request id."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from remediate.logs.audit import ReservedFieldError, audit_event
from remediate.logs.safe import LOG_FORMAT
from remediate.logs.setup import REQUEST_ID, RequestIdFilter, TextFormatter, configure_logging, json_formatter
from remediate.server.requestlog import request_id_from
from tests.support import logfmt


def _record(message: str = "hello", level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("remediate.test", level, __file__, 1, message, (), None)
    record.__dict__.update(extra)
    return record


def test_text_lines_end_with_the_structured_fields_as_logfmt_escaped_and_quoted() -> None:
    line = TextFormatter(LOG_FORMAT).format(
        _record(run_id=7, reason='a "quoted" reason', target="node-a\nFORGED", error=None, request_id="r-1")
    )

    assert "\n" not in line
    assert line.endswith(
        ' INFO remediate.test: hello run_id=7 reason="a \\"quoted\\" reason" target="node-a\\\\nFORGED" request_id=r-1'
    )
    assert "error=" not in line  # a field without a value is left out


def test_an_audit_events_name_is_its_message_once_in_text() -> None:
    line = TextFormatter(LOG_FORMAT).format(_record("pause", event="pause", principal="alice"))

    assert line.endswith("remediate.test: pause principal=alice")


HOSTILE = 'GPU 3 principal=admin event=approval reason="forged"'


@pytest.mark.parametrize("args", [("run %s playbook %s: %s", (7, "log-it", HOSTILE)), ("%(m)s", ({"m": HOSTILE},))])
def test_a_label_in_a_text_message_never_reads_as_a_logfmt_field(args: tuple[str, tuple[object, ...]]) -> None:
    """A label rendered into a message (the log action's) must not give a logfmt parser of the line a
    `principal` or an `event` of its own: only the record's real fields have values."""
    message, message_args = args
    record = logging.LogRecord("remediate.executor", logging.INFO, __file__, 1, message, message_args, None)
    record.__dict__.update(run_id=7, principal="alice")
    line = TextFormatter(LOG_FORMAT).format(record)

    assert logfmt.fields(line) == {"run_id": "7", "principal": "alice"}
    assert "GPU 3 principal\\x3dadmin event\\x3dapproval reason\\x3d\\x22forged\\x22" in line  # still legible


def test_the_logfmt_parser_reads_fields_and_refuses_a_quote_where_a_key_starts() -> None:
    assert logfmt.pairs('a b=1 c="x \\"y\\" = z" d=') == [("a", None), ("b", "1"), ("c", 'x "y" = z'), ("d", "")]
    assert logfmt.fields("k=1 k=2") == {"k": "1"}
    with pytest.raises(logfmt.LogfmtError):
        logfmt.pairs('a "b"')


def test_the_servers_own_format_string_stays_as_written() -> None:
    record = logging.LogRecord(
        "remediate.serve", logging.INFO, __file__, 1, "or REMEDIATE_MODE=enforce to act", (), None
    )
    assert TextFormatter(LOG_FORMAT).format(record).endswith(": or REMEDIATE_MODE=enforce to act")


def test_json_lines_are_one_object_with_time_level_logger_message_and_the_fields() -> None:
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        record = _record("run 3\nFORGED", logging.WARNING, run_id=3, outcome="failed")
        record.exc_info = sys.exc_info()
    line = json_formatter().format(record)

    assert "\n" not in line
    data = json.loads(line)
    assert data["time"].endswith("+00:00")
    assert (data["level"], data["logger"], data["message"]) == ("WARNING", "remediate.test", "run 3\nFORGED")
    assert (data["run_id"], data["outcome"]) == (3, "failed")
    assert "RuntimeError: boom" in data["exc_info"]


@pytest.fixture
def root_logging() -> Iterator[None]:
    """The root logger's handlers and level put back after a test that configures them."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize(("log_format", "formatter"), [("text", TextFormatter), ("json", None)])
def test_configure_logging_leaves_one_handler_of_the_format_at_the_level(
    root_logging: None, log_format: str, formatter: type | None
) -> None:
    logging.getLogger().addHandler(logging.StreamHandler(io.StringIO()))  # one set before: replaced, not kept

    configure_logging(log_format, "warning")

    [handler] = logging.getLogger().handlers
    assert logging.getLogger().level == logging.WARNING
    if formatter is not None:
        assert type(handler.formatter) is formatter
    else:
        assert type(handler.formatter).__name__ == "JsonFormatter"
    assert any(isinstance(f, RequestIdFilter) for f in handler.filters)
    assert not logging.getLogger("remediate.audit").isEnabledFor(logging.INFO)
    assert logging.getLogger("remediate.audit").isEnabledFor(logging.WARNING)


def test_an_audit_event_is_a_record_of_remediate_audit_with_its_fields_and_the_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="remediate.audit")
    token = REQUEST_ID.set("req-42")
    try:
        audit_event("run_ended", level=logging.WARNING, run_id=5, outcome="failed")
        [record] = caplog.records
        RequestIdFilter().filter(record)  # what the handler of configure_logging does with each record
    finally:
        REQUEST_ID.reset(token)

    assert (record.name, record.levelno, record.getMessage()) == ("remediate.audit", logging.WARNING, "run_ended")
    assert (record.event, record.run_id, record.outcome) == ("run_ended", 5, "failed")  # type: ignore[attr-defined]
    assert record.request_id == "req-42"  # type: ignore[attr-defined]


@pytest.mark.parametrize("field", ["name", "message", "request_id", "event", "time"])
def test_a_field_named_like_a_records_own_key_is_refused(field: str) -> None:
    with pytest.raises(ReservedFieldError, match=field):
        audit_event("pause", **{field: "x"})


def test_outside_a_request_no_request_id_is_added() -> None:
    record = _record()
    RequestIdFilter().filter(record)
    assert not hasattr(record, "request_id")


@pytest.mark.parametrize(
    ("header", "kept"),
    [("abc-123_x.y:z", True), ("a" * 128, True), ("a" * 129, False), ("a b", False), ("", False), (None, False)],
)
def test_a_clients_request_id_is_kept_only_when_sane(header: str | None, kept: bool) -> None:
    found = request_id_from(header)
    assert (found == header) is kept
    assert len(found) <= 128
