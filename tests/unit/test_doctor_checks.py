"""The doctor's checks that need no other system: tokens, the exit code, the dcgm-exporter generation of a name."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.config.settings import Settings
from remediate.doctor import Status, dcgm, exit_code, report_json
from remediate.doctor.burnin import check_burnin
from remediate.doctor.model import fail, ok, warn
from remediate.doctor.tokens import check_tokens

WEBHOOK, OPERATOR = "w" * 32, "o" * 32


def statuses(settings: Settings) -> dict[str, Status]:
    return {check.name: check.status for check in check_tokens(settings)}


def test_tokens_ok_with_a_webhook_and_an_operator_token() -> None:
    assert statuses(Settings.of(webhook_token=WEBHOOK, operator_token=OPERATOR)) == {
        "tokens: webhook": Status.OK,
        "tokens: operator": Status.OK,
    }


def test_no_token_fails_and_insecure_no_auth_warns() -> None:
    assert statuses(Settings.of()) == {"tokens: server": Status.FAIL}
    assert statuses(Settings.of(insecure_no_auth=True)) == {"tokens: server": Status.WARN}


def test_agents_without_an_agent_token_fail(tmp_path: Path) -> None:
    agents = (("node-a", "http://10.0.0.5:9096"),)
    base = {"webhook_token": WEBHOOK, "operator_token": OPERATOR, "agents": agents}
    assert statuses(Settings.of(**base))["tokens: agent"] is Status.FAIL
    assert statuses(Settings.of(**base, agent_token="a" * 32))["tokens: agent"] is Status.OK
    (tmp_path / "agent-token").write_text("short")
    (check,) = [c for c in check_tokens(Settings.of(**base, agent_token_file=tmp_path / "agent-token"))
                if c.name == "tokens: agent"]  # fmt: skip
    assert check.status is Status.FAIL and "at least" in check.detail  # a token too short to be one


def test_the_burnin_check_fails_a_table_without_the_image_the_kubernetes_burnin_runs() -> None:
    assert check_burnin(Settings()) == []  # no table: the burn-in is skipped, nothing to check
    table = (("cpu", 0.5),)
    (lacking,) = check_burnin(Settings.of(burnin_baselines=table, burnin_python="/opt/py/bin/python"))
    assert lacking.status is Status.FAIL and "burnin_image is not" in lacking.detail, lacking
    (fine,) = check_burnin(Settings.of(burnin_baselines=table, burnin_python="/opt/py/bin/python",
                                       burnin_image="site/img:1", burnin_namespace="gpu-ops"))  # fmt: skip
    assert (fine.status, fine.detail) == (Status.OK, "baselines of cpu; runs on kubernetes")


def test_the_exit_code_is_the_worst_checks() -> None:
    assert exit_code([]) == 0
    assert exit_code([ok("f", "a", "")]) == 0
    assert exit_code([ok("f", "a", ""), warn("f", "b", "", "x")]) == 1
    assert exit_code([warn("f", "b", "", "x"), fail("f", "c", "", "y"), ok("f", "a", "")]) == 2
    assert report_json([warn("f", "b", "seen", "x")]) == {
        "status": "WARN",
        "checks": [{"family": "f", "name": "b", "status": "WARN", "detail": "seen", "fix": "x"}],
    }


@pytest.mark.parametrize(
    ("name", "generation"),
    [
        ("DCGM_FI_DEV_GPU_TEMP", dcgm.LEGACY),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", dcgm.LEGACY),
        ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", dcgm.CANONICAL),
        ("DCGM_FI_DEV_FB_USED_BYTES", dcgm.CANONICAL),
        ("DCGM_FI_DEV_XID_ERROR", dcgm.CANONICAL),
        ("DCGM_EXP_XID_ERRORS_COUNT", dcgm.EXPORTER_OWN),
        ("DCGM_FI_DEV_SOMETHING", dcgm.UNKNOWN),
        ("node_filesystem_avail_bytes", None),
    ],
)
def test_the_generation_a_dcgm_name_suggests(name: str, generation: str | None) -> None:
    assert dcgm.generation(name) == generation


def test_every_legacy_name_maps_to_a_name_of_the_new_generation() -> None:
    assert {dcgm.generation(new) for new in dcgm.LEGACY_TO_CANONICAL.values()} == {dcgm.CANONICAL}
