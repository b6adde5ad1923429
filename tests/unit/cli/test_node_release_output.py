"""What `remediate node release` prints of its gate's rounds: the first round's full table (every check of every
GPU), then one line a round plus only the checks that are not ok, so a long soak stays readable and a check that
turns mid-soak stands out."""

from __future__ import annotations

import pytest

from remediate.cli.node import _show_round
from remediate.executor.readmission import CheckVerdict, GateRound

GPU0, GPU1 = "GPU 0 (GPU-a)", "GPU 1 (GPU-b)"


def _round(number: int, at_s: float, *turned: CheckVerdict) -> GateRound:
    quiet = tuple(CheckVerdict(gpu, check, "ok", f"{check}: 0 <= 0")
                  for gpu in (GPU0, GPU1) for check in ("ecc_dbe_volatile", "retired_pages"))  # fmt: skip
    checks = tuple(c for c in quiet if (c.gpu, c.check) not in {(t.gpu, t.check) for t in turned}) + turned
    verdict = "fail" if any(t.verdict == "fail" for t in turned) else "warn" if turned else "ok"
    return GateRound(number, 7, at_s, verdict, checks, (), ())


def test_the_first_round_prints_every_check_and_the_later_ones_a_line_and_what_is_not_ok(
    capsys: pytest.CaptureFixture[str],
) -> None:
    warm = CheckVerdict(GPU1, "retired_pages", "warn", "retired_pages: 3 pending")
    bad = CheckVerdict(GPU0, "ecc_dbe_volatile", "fail", "ecc_dbe_volatile: 2 > 0")
    for done in (_round(1, 0.2), _round(2, 300.4), _round(3, 600.0, warm), _round(4, 899.6, warm, bad)):
        _show_round(done)

    assert capsys.readouterr().out.splitlines() == [
        "round 1/7 at +0s: ok",
        f"  {GPU0}  ecc_dbe_volatile  ok  ecc_dbe_volatile: 0 <= 0",
        f"  {GPU0}  retired_pages  ok  retired_pages: 0 <= 0",
        f"  {GPU1}  ecc_dbe_volatile  ok  ecc_dbe_volatile: 0 <= 0",
        f"  {GPU1}  retired_pages  ok  retired_pages: 0 <= 0",
        "round 2/7 at +5m: ok",
        "round 3/7 at +10m: warn",
        f"  {GPU1}  retired_pages  warn  retired_pages: 3 pending",
        "round 4/7 at +15m: fail",
        f"  {GPU1}  retired_pages  warn  retired_pages: 3 pending",
        f"  {GPU0}  ecc_dbe_volatile  fail  ecc_dbe_volatile: 2 > 0",
    ]
