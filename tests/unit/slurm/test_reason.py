"""The drain reason (what `sinfo -R` shows) and the node names that may reach scontrol. Pure; what Slurm keeps of
a reason is checked against the real slurmctld in tests/actions/test_slurm.py."""

from __future__ import annotations

import pytest

from remediate.slurm import REASON_MAX, check_node_name, check_partition_name, drain_reason, drained_by_run


def test_the_reason_names_the_run_the_alert_the_gpu_and_the_note() -> None:
    assert drain_reason(42, alertname="GPUXidCritical", gpu="3", note="xid 79") == (
        "remediate run 42: GPUXidCritical GPU 3 (xid 79)"
    )
    assert drain_reason(42) == "remediate run 42"
    assert drain_reason(42, note="fell off the bus") == "remediate run 42: (fell off the bus)"


def test_the_reason_is_one_line_of_safe_characters_within_slurms_length() -> None:
    reason = drain_reason(7, alertname="X\nY", note="a \"b\" 'c' $(d) `e`; f|g=h\tz " * 40)
    assert reason.startswith("remediate run 7: X Y (a _b_ _c_ _(d) _e__ f_g_h z a ")
    assert REASON_MAX - 4 < len(reason) <= REASON_MAX and reason.endswith("...")  # cut at a space: one less
    assert drain_reason(7, note="x" * 500, limit=30) == "remediate run 7: (xxxxxxxxx..."


def test_only_remediates_mark_at_the_start_names_a_run() -> None:
    assert drained_by_run("remediate run 42: GPUXidCritical") == 42
    assert drained_by_run("remediate run 42") == 42
    for other in ("bad DIMM", "see remediate run 42", "remediate run 42x", "remediate run: 4", ""):
        assert drained_by_run(other) is None


@pytest.mark.parametrize("name", ["gpu-01", "vm", "node7.cluster.example", "GPU_01"])
def test_a_host_name_is_a_node_name(name: str) -> None:
    assert check_node_name(name) is None


@pytest.mark.parametrize("name", ["", "gpu-[01-04]", "a,b", "a b", "-x", "a..b", "x;y", "$(id)", "a" * 254])
def test_a_list_a_range_or_a_shell_word_is_not(name: str) -> None:
    assert check_node_name(name) is not None


def test_partition_names() -> None:
    assert check_partition_name("train") is None and check_partition_name("gpu_a100.long") is None
    assert check_partition_name("train,debug") is not None and check_partition_name("") is not None
