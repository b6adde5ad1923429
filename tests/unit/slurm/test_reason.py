"""The drain reason (what `sinfo -R` shows) and the node names that may reach scontrol. Pure; what Slurm keeps of
a reason is checked against the real slurmctld in tests/actions/test_slurm.py."""

from __future__ import annotations

import pytest

from remediate.slurm import (
    REASON_MAX,
    SlurmNode,
    check_node_name,
    check_owner,
    check_partition_name,
    drain_reason,
    drained_by_run,
    handed_to,
    handoff_reason,
)


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


def test_a_handoff_reason_names_the_owner_first_then_why_then_the_run() -> None:
    reason = handoff_reason("breakfix", 42, why="XID 79 still reported after a reset")
    assert reason == "breakfix: XID 79 still reported after a reset (from remediate run 42)"
    assert handed_to(reason) == ("breakfix", 42) and handed_to(reason).owner == "breakfix"
    assert drained_by_run(reason) is None  # not remediate's mark: slurm.resume leaves it
    assert handoff_reason("tickets", 7) == "tickets: (from remediate run 7)"
    assert handed_to("tickets: (from remediate run 7)") == ("tickets", 7)


def test_a_handoff_reason_is_safe_and_cut_in_its_why_never_the_owner_or_the_run() -> None:
    reason = handoff_reason("breakfix", 42, why='a "b"\n$(c); d=e ' * 40)
    assert reason.startswith("breakfix: a _b_ _(c)_ d_e a ") and reason.endswith("... (from remediate run 42)")
    assert REASON_MAX - 4 < len(reason) <= REASON_MAX and handed_to(reason) == ("breakfix", 42)
    cut = handoff_reason("b", 1, why="x" * 50, limit=40)
    assert cut == "b: xxxxxxxxxxx... (from remediate run 1)" and len(cut) == 40


def test_only_a_reason_ending_in_the_run_that_handed_it_over_is_a_handoff() -> None:
    for other in (
        "breakfix: bad DIMM",  # a person's reason in the same shape, without the run
        "remediate run 42: GPUXidCritical",
        "bad DIMM (from remediate run 42)",  # no owner
        "break fix: x (from remediate run 42)",
        "breakfix: x (from remediate run 42) later",
        "breakfix: x (from remediate run 4x)",
        "",
    ):
        assert handed_to(other) is None, other
    assert handed_to("breakfix: see (from remediate run 3) (from remediate run 42)") == ("breakfix", 42)


@pytest.mark.parametrize("owner", ["breakfix", "tickets.dc-1", "ops@site", "a"])
def test_an_owner_is_one_word(owner: str) -> None:
    assert check_owner(owner) is None


@pytest.mark.parametrize("owner", ["", "break fix", "a:b", "(x)", "-x", "a" * 64, "remediate"])
def test_an_owner_that_would_not_read_back_or_is_remediate_is_refused(owner: str) -> None:
    assert check_owner(owner) is not None
    with pytest.raises(ValueError, match="owner"):
        handoff_reason(owner, 1)


def test_a_node_is_handed_over_only_while_drained_and_still_counts_as_held() -> None:
    reason = "breakfix: XID 79 (from remediate run 42)"
    drained = SlurmNode("gpu-01", "gpu-01", "idle", frozenset({"DRAIN"}), reason, "root")
    assert (drained.handed_to, drained.drained_by_run, drained.held_by_run) == (("breakfix", 42), None, 42)
    resumed = SlurmNode("gpu-01", "gpu-01", "idle", frozenset(), reason, "root")
    assert (resumed.handed_to, resumed.held_by_run) == (None, None)
    ours = SlurmNode("gpu-01", "gpu-01", "idle", frozenset({"DRAIN"}), "remediate run 40: X", "root")
    assert (ours.handed_to, ours.held_by_run) == (None, 40)


@pytest.mark.parametrize("name", ["gpu-01", "vm", "node7.cluster.example", "GPU_01"])
def test_a_host_name_is_a_node_name(name: str) -> None:
    assert check_node_name(name) is None


@pytest.mark.parametrize("name", ["", "gpu-[01-04]", "a,b", "a b", "-x", "a..b", "x;y", "$(id)", "a" * 254])
def test_a_list_a_range_or_a_shell_word_is_not(name: str) -> None:
    assert check_node_name(name) is not None


def test_partition_names() -> None:
    assert check_partition_name("train") is None and check_partition_name("gpu_a100.long") is None
    assert check_partition_name("train,debug") is not None and check_partition_name("") is not None
