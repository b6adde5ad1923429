"""remediate.executor.grafana: the annotation of a finished run, which runs get one, and posting off the run's path."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediate.config.settings import load_settings
from remediate.errors import ConfigError
from remediate.executor.grafana import Annotator, GrafanaTarget, annotation, target_from_settings
from remediate.runs import FinishedRun, RunStatus
from tests.support.realsystems import WebhookRecorder
from tests.support.waiting import scaled, wait_until

T0 = 1_800_000_000.0
TOKEN = "glsa_unit-token"


def finished(
    status: RunStatus = RunStatus.SUCCEEDED, *, mode: str = "enforce", run_id: int = 7, error: str | None = None
) -> FinishedRun:
    return FinishedRun(
        run_id=run_id, playbook="gpu-overheat", target="gpu-node-7", alertname="GPUTemperatureHigh", phase="firing",
        mode=mode, status=status, error=error, started_at=T0, finished_at=T0 + 2.5,
    )  # fmt: skip


class Outcomes(list[str]):
    def __call__(self, outcome: str) -> None:
        self.append(outcome)


@pytest.fixture
def sink() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path="") as recorder:
        yield recorder


def annotator(sink: WebhookRecorder, outcomes: Outcomes, **kwargs: object) -> Annotator:
    options: dict[str, object] = {"retry_wait": 0.01, **kwargs}
    return Annotator(GrafanaTarget(sink.url, TOKEN), on_outcome=outcomes, **options)  # type: ignore[arg-type]


def test_the_annotation_spans_the_run_and_is_tagged_with_playbook_node_and_status() -> None:
    body = annotation(finished(RunStatus.FAILED, error="step 0 cool (gpu.set_power_limit): NVML error"))

    assert body["time"] == int(T0 * 1000)
    assert body["timeEnd"] == int((T0 + 2.5) * 1000)
    assert body["tags"] == ["remediate", "playbook:gpu-overheat", "node:gpu-node-7", "status:failed"]
    assert body["text"].startswith("remediate: gpu-overheat on gpu-node-7: failed (alert GPUTemperatureHigh, run 7)")
    assert "NVML error" in body["text"]
    assert "href" not in body["text"]


def test_the_link_to_the_run_page_comes_from_run_link_and_is_quoted() -> None:
    body = annotation(finished(), run_link=lambda run_id: f'https://remediate.example/ui/runs/{run_id}?a=1&b="')

    assert '<a href="https://remediate.example/ui/runs/7?a=1&amp;b=&quot;">run 7</a>' in body["text"]


def test_an_executed_run_is_posted_with_the_token(sink: WebhookRecorder) -> None:
    outcomes = Outcomes()
    grafana = annotator(sink, outcomes)

    grafana(finished())

    request = sink.wait_for()
    assert (request.method, request.path) == ("POST", "/api/annotations")
    assert request.header("Authorization") == f"Bearer {TOKEN}"
    assert request.json == annotation(finished())
    assert grafana.join() and outcomes == ["posted"]


@pytest.mark.parametrize(
    ("status", "mode"),
    [
        (RunStatus.PLANNED, "dry-run"),
        (RunStatus.SUCCEEDED, "dry-run"),
        (RunStatus.REJECTED, "enforce"),
        (RunStatus.CANCELLED, "enforce"),
    ],
)
def test_a_run_that_did_not_execute_is_not_annotated(sink: WebhookRecorder, status: RunStatus, mode: str) -> None:
    outcomes = Outcomes()
    grafana = annotator(sink, outcomes)

    grafana(finished(status, mode=mode))
    grafana(finished(run_id=8))  # then one that did: the only one posted

    assert sink.wait_for().json["text"].endswith("run 8)")
    assert grafana.join() and outcomes == ["posted"] and len(sink.requests) == 1


@pytest.mark.parametrize(("status", "tries"), [(500, 3), (401, 1)], ids=["failing-tried-3-times", "refused-token-once"])
def test_a_failing_grafana_is_tried_a_few_times_a_refused_token_once_then_counted_as_failed(
    sink: WebhookRecorder, status: int, tries: int
) -> None:
    sink.status = status
    outcomes = Outcomes()
    grafana = annotator(sink, outcomes, tries=3)

    grafana(finished())

    assert grafana.join() and outcomes == ["failed"]
    assert len(sink.requests) == tries


def test_label_derived_text_is_inert_html_in_the_annotation() -> None:
    """A label's `<img onerror>` reached Grafana's HTML as markup."""
    run = dataclasses.replace(
        finished(RunStatus.FAILED, error='step 0 (k8s.cordon): node "<script>x()</script>" not found\nforged line'),
        alertname='<img src=x onerror="alert(1)">',
        target="node-a\n<b>all clear</b> https://evil.example",
        playbook="gpu<i>",
    )
    body = annotation(run, run_link=lambda run_id: f"https://remediate.example/ui/runs/{run_id}")

    text = body["text"]
    assert "<img" not in text and "<script" not in text and "<b>" not in text and "<i>" not in text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in text
    assert "node-a⏎&lt;b&gt;all clear&lt;/b&gt; https:\u200b//evil.example" in text
    assert "not found⏎forged line" in text
    # remediate's own markup stays: the link to the run page, and the lines it separates.
    assert text.endswith('\n<a href="https://remediate.example/ui/runs/7">run 7</a>')
    assert text.count("\n") == 2


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_not_followed_so_the_token_never_leaves_for_another_url(
    sink: WebhookRecorder, status: int
) -> None:
    """The annotator followed redirects (the token went along)."""
    from tests.actions.test_notify import _Redirector

    redirector = _Redirector(status, f"{sink.url}/elsewhere")
    outcomes = Outcomes()
    try:
        grafana = Annotator(GrafanaTarget(redirector.url.removesuffix("/hook"), TOKEN), on_outcome=outcomes, tries=1)
        grafana(finished())
        assert grafana.join()
    finally:
        redirector.close()

    assert outcomes == ["failed"] and redirector.posts == 1
    assert sink.requests == []


def test_a_slow_grafana_never_holds_the_caller_and_a_full_queue_drops(sink: WebhookRecorder) -> None:
    sink.delay = 1.0
    outcomes = Outcomes()
    grafana = annotator(sink, outcomes, max_queued=1, timeout=5.0)

    started = time.monotonic()
    grafana(finished(run_id=1))
    wait_until(lambda: len(sink.requests) == 1, 5)  # the thread holds run 1, waiting for its answer
    grafana(finished(run_id=2))  # queued
    grafana(finished(run_id=3))  # the queue is full: dropped
    elapsed = time.monotonic() - started

    assert elapsed < 0.9  # the three calls returned while the sink was still answering the first
    assert outcomes == ["dropped"]
    assert grafana.join(timeout=scaled(10))
    assert sorted(outcomes) == ["dropped", "posted", "posted"]
    assert [r.json["text"].rsplit(" ", 1)[1] for r in sink.requests] == ["1)", "2)"]


def test_the_token_is_not_in_the_targets_repr() -> None:
    assert TOKEN not in repr(GrafanaTarget("https://grafana.example", TOKEN))


def test_the_settings_give_the_target_with_the_token_of_its_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")

    settings = load_settings(
        env={"REMEDIATE_GRAFANA_URL": "https://grafana.example/", "REMEDIATE_GRAFANA_TOKEN_FILE": str(token_file)}
    )

    assert target_from_settings(settings.grafana) == GrafanaTarget("https://grafana.example", TOKEN)
    assert target_from_settings(load_settings(env={}).grafana) is None


def test_a_grafana_url_without_a_token_or_not_http_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="grafana_url is set but grafana_token_file is not"):
        target_from_settings(load_settings(env={"REMEDIATE_GRAFANA_URL": "https://grafana.example"}).grafana)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match=r"grafana_token_file .* is empty"):
        target_from_settings(
            load_settings(
                env={"REMEDIATE_GRAFANA_URL": "https://grafana.example", "REMEDIATE_GRAFANA_TOKEN_FILE": str(empty)}
            ).grafana
        )
    with pytest.raises(ConfigError, match="grafana_url must be an absolute http"):
        load_settings(env={"REMEDIATE_GRAFANA_URL": "grafana.example"})
