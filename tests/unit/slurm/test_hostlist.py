"""Slurm's hostlist expressions, as `squeue --json` gives a job's nodes. Pure."""

from __future__ import annotations

import pytest

from remediate.slurm.hostlist import expand


def test_ranges_lists_and_plain_names_expand_in_order() -> None:
    assert expand("gpu-[01-03,07],vm") == ("gpu-01", "gpu-02", "gpu-03", "gpu-07", "vm")
    assert expand("n[8-10]") == ("n8", "n9", "n10") and expand("a[1-2]b") == ("a1b", "a2b")
    assert expand("vm") == ("vm",) and expand("") == ()


@pytest.mark.parametrize("text", ["gpu-[01-", "gpu-[a-b]", "gpu-[1-2][3]"])
def test_what_is_not_a_hostlist_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a hostlist"):
        expand(text)
