"""A credential for notify.webhook is never stored, shown or logged, yet still sent."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediate.errors import PlaybookError
from tests.support.http import READ_TOKEN, Server, real_firing
from tests.support.realsystems import WebhookRecorder

SECRET = "Bearer oncall-s3cr3t-7f3a9c"


@pytest.fixture
def recorder() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="/hooks/oncall") as server:
        yield server


def playbook(url: str, with_: str) -> str:
    return f"""\
name: notify-xid
match:
  alertname: GpuXidError
target: node
steps:
  - action: notify.webhook
    with:
      url: {url}
      message: "GPU {{{{ labels.gpu }}}}"
{with_}
    retries: 0
"""


def test_a_secret_header_from_headers_file_reaches_the_receiver_but_never_the_database_api_or_logs(
    make_server: Callable[..., Server],
    recorder: WebhookRecorder,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret_file = tmp_path / "oncall-headers.yaml"
    secret_file.write_text(f"Authorization: {SECRET}\n", encoding="utf-8")
    server = make_server(playbooks={"notify.yaml": playbook(recorder.url, f"      headers_file: {secret_file}\n")})
    caplog.set_level(logging.DEBUG)

    run_id = server.webhook(real_firing()).get_json()["runs"][0]
    assert server.drain() == 1

    assert recorder.wait_for().header("Authorization") == SECRET
    detail = server.get(f"/runs/{run_id}", token=READ_TOKEN)
    assert detail.get_json()["status"] == "succeeded"
    assert detail.get_json()["steps"][0]["params"]["headers_file"] == str(secret_file)
    shown = [detail.data, server.get("/history", token=READ_TOKEN).data]
    server.store.close()  # checkpoint: the WAL's pages are in the main file now, both are grepped
    stored = [p.read_bytes() for p in server.db_path.parent.iterdir() if p.name.startswith(server.db_path.name)]
    for blob in [*shown, *stored, caplog.text.encode()]:
        assert b"s3cr3t" not in blob


def test_a_playbook_with_a_credential_in_inline_headers_is_refused_at_load(
    make_server: Callable[..., Server], recorder: WebhookRecorder
) -> None:
    text = playbook(recorder.url, f"      headers: {{Authorization: {json.dumps(SECRET)}}}\n")

    with pytest.raises(PlaybookError, match="Authorization would be stored and shown in the history"):
        make_server(playbooks={"notify.yaml": text})
