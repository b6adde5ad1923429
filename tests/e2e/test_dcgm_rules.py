"""The shipped GPU rules across dcgm-exporter generations: each alert fed by dcgm-exporter reads only the
normalised series of dcgm.rules.yml, and its promtool unit tests see it fire on series of the legacy generation
(before 4.8.3: legacy names, `Hostname`) and of 4.9+ (DCGM 4.7 names, `hostname`, DCGM_FI_SYSTEM_DRIVER_VERSION).
`pytest -s` prints the matrix (alert x generation). The input-silence alerts link runbook sections that exist;
gpu-xid-quarantine's proven-healthy query, run by promtool, holds a node back while its gauge still shows a serious
XID. (promtool itself runs on every rule file in test_gpu_rules.py.)"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.support.realsystems import PROMTOOL
from tests.support.rules import RULES_DIR, as_alert, rules_of, shipped_engine
from tests.support.waiting import scaled

pytestmark = [pytest.mark.integration]

LEGACY, MIDDLE, NEW = "<=4.8.2", "4.8.3-4.8", ">=4.9"
NEW_NAMES = {
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
    "DCGM_FI_DEV_XID_ERROR",
    "DCGM_FI_DEV_ROW_REMAP_FAILED",
    "DCGM_FI_DEV_FB_USED_BYTES",
    "DCGM_FI_DEV_FB_FREE_BYTES",
}
FED_BY_DCGM = ("dcgm", "gpu", "xid", "training-resources")
RUNBOOK_BASE = "https://github.com/example/remediate/blob/main/docs/runbooks.md#"
SERIES = re.compile(r"^(\w+)\{(.*)\}$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def _generation(name: str, labels: dict[str, str]) -> str:
    """Which dcgm-exporter generation writes a series of this name and labels."""
    if name in NEW_NAMES or "DCGM_FI_SYSTEM_DRIVER_VERSION" in labels:
        return NEW
    return LEGACY if "Hostname" in labels else MIDDLE


def _dcgm_series(case: dict) -> list[tuple[str, dict[str, str]]]:
    found = []
    for series in case["input_series"]:
        match = SERIES.match(series["series"])
        if match and match.group(1).startswith("DCGM_"):
            found.append((match.group(1), dict(LABEL.findall(match.group(2)))))
    return found


def generation_matrix() -> dict[str, set[str]]:
    """Alert -> the exporter generations whose series made it fire in the shipped unit tests (a series counts for
    the alert when it names the alert's node)."""
    matrix: dict[str, set[str]] = defaultdict(set)
    for name in FED_BY_DCGM:
        for case in yaml.safe_load((RULES_DIR / f"{name}.rules.test.yml").read_text())["tests"]:
            series = _dcgm_series(case)
            for check in case.get("alert_rule_test", []):
                for alert in check.get("exp_alerts") or []:
                    node = alert["exp_labels"].get("hostname")
                    for metric, labels in series:
                        if node and node in (labels.get("Hostname"), labels.get("hostname")):
                            matrix[check["alertname"]].add(_generation(metric, labels))
    return matrix


def _alerts_reading_dcgm() -> set[str]:
    return {
        rule["alert"]
        for name in FED_BY_DCGM
        for rule in rules_of(name)
        if "alert" in rule and re.search(r"DCGM_|gpu:", rule["expr"])
    }


def test_no_shipped_alert_reads_a_dcgm_exporter_series_but_through_the_normalised_layer() -> None:
    alerts = [rule for name in FED_BY_DCGM for rule in rules_of(name) if "alert" in rule]
    assert len(alerts) >= 8
    for rule in alerts:
        assert "DCGM_" not in rule["expr"], f"{rule['alert']} reads a dcgm-exporter name itself: {rule['expr']}"
        for annotation in rule["annotations"].values():  # a summary's own query reads the layer too
            for query in re.findall(r'query \(printf "([^"]*)"', annotation):
                assert query.startswith("gpu:"), f"{rule['alert']}: {query}"
    records = {rule["record"]: rule["expr"] for rule in rules_of("dcgm") if "record" in rule}
    # Each renamed signal: the 4.9+ name first, `or on (UUID)` the legacy one (one series per GPU in an upgrade).
    for record, new, old in [
        ("gpu:temp_celsius", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_GPU_TEMP"),
        ("gpu:xid_last", "DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_XID_ERRORS"),
        ("gpu:row_remap_failed", "DCGM_FI_DEV_ROW_REMAP_FAILED", "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
        ("gpu:fb_used_bytes", "DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_FB_USED"),
        ("gpu:fb_free_bytes", "DCGM_FI_DEV_FB_FREE_BYTES", "DCGM_FI_DEV_FB_FREE"),
    ]:
        expr = records[record]
        first, second = expr.split("or on (UUID)")
        assert re.search(rf"\b{new}\b", first) and re.search(rf"\b{old}\b", second), record
        assert '"hostname", "$1", "Hostname"' in expr and "Hostname" not in expr.split("max by", 1)[1].split(")")[0]


def test_every_alert_fed_by_dcgm_exporter_fires_on_the_legacy_and_the_newest_generation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    matrix = generation_matrix()
    expected = _alerts_reading_dcgm()
    assert expected >= {"GPUTemperatureHigh", "GPUXidCritical", "GPUMemoryPressure", "GPUInputsSilent"}
    with capsys.disabled():
        print("\nrule x dcgm-exporter generation (the promtool unit tests that see it fire):")
        print(f"  {'rule':28} {LEGACY:>9} {MIDDLE:>10} {NEW:>6}")
        for alert in sorted(expected):
            cells = ["yes" if g in matrix[alert] else "-" for g in (LEGACY, MIDDLE, NEW)]
            print(f"  {alert:28} {cells[0]:>9} {cells[1]:>10} {cells[2]:>6}")
    for alert in expected:
        assert matrix[alert] == {LEGACY, MIDDLE, NEW}, f"{alert} fires in the unit tests on {sorted(matrix[alert])}"


def test_the_input_silence_alerts_link_runbook_sections_that_exist() -> None:
    page = (RULES_DIR.parents[1] / "docs" / "runbooks.md").read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", page, re.M)}
    alerts = [rule for rule in rules_of("dcgm") if "alert" in rule]
    assert {rule["alert"] for rule in alerts} == {"GPUInputsSilent", "DCGMExporterDown"}
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]
        assert url == RUNBOOK_BASE + rule["alert"].lower(), url
        assert url.removeprefix(RUNBOOK_BASE) in anchors, f"{rule['alert']}: no section in docs/runbooks.md"
        section = page.split(f"## {rule['alert']}\n", 1)[1].split("\n## ", 1)[0]
        assert "**What it means.**" in section and "**What to do.**" in section, rule["alert"]


def _proven_healthy_query(host: str) -> str:
    """gpu-xid-quarantine's proven-healthy query as remediate renders it for the node's resolved alert."""
    alert = as_alert("GPUXidCritical", {"severity": "critical", "hostname": host}, {}, "resolved")
    (evaluation,) = [e for e in shipped_engine().evaluate(alert) if e.playbook.name == "gpu-xid-quarantine"]
    assert evaluation.error is None, evaluation.error
    return str(evaluation.rungs[0].steps[0].params["query"])


def test_proven_healthy_holds_back_a_node_whose_gauge_still_shows_a_serious_xid(tmp_path: Path) -> None:
    """The alert resolves once no new XID came for its window, but the latched gauge still says 79 until the
    exporter restarts (the node's reboot): the undo's query stays empty then. An application XID (43), or a
    cleared gauge, lets it through; on either exporter generation (names and node label)."""
    query = _proven_healthy_query("node-a")
    # The same serious XIDs as the rules'.
    (layer,) = [r["expr"] for r in rules_of("dcgm") if r.get("record") == "gpu:xid_serious_recent"]
    codes = re.search(r'xid=~"([0-9|]+)"', layer)
    assert codes, layer
    serious = codes.group(1)
    assert f'"xid", "{serious}"' in query and serious.split("|") == re.findall(r"gpu:xid_last == (\d+)", layer)

    def series(name: str, node_label: str, gpu: str, values: str) -> dict[str, str]:
        labels = f'gpu="{gpu}", UUID="GPU-{gpu}0000000-0000-5000-8000-000000000000", {node_label}="node-a"'
        return {"series": f"{name}{{{labels}}}", "values": values}

    cases = {  # the last XIDs of the node's two GPUs -> does the query hold (one sample) at 10m?
        ("DCGM_FI_DEV_XID_ERRORS", "Hostname", "79", "0"): False,
        ("DCGM_FI_DEV_XID_ERRORS", "Hostname", "43", "0"): True,
        ("DCGM_FI_DEV_XID_ERROR", "hostname", "0", "119"): False,
        ("DCGM_FI_DEV_XID_ERROR", "hostname", "0", "0"): True,
    }
    tests = []
    for (name, node_label, first, second), holds in cases.items():
        temp = "DCGM_FI_DEV_GPU_TEMP" if node_label == "Hostname" else "DCGM_FI_DEV_GPU_TEMP_CELSIUS"
        tests.append(
            {
                "interval": "1m",
                "input_series": [
                    series(temp, node_label, "0", "50x10"),
                    series(temp, node_label, "1", "50x10"),
                    series(name, node_label, "0", f"{first}x10"),
                    series(name, node_label, "1", f"{second}x10"),
                ],
                "promql_expr_test": [
                    {"expr": query, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 2}] if holds else []}
                ],
            }
        )
    test_file = tmp_path / "proven-healthy.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": tests}))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=scaled(60), check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
