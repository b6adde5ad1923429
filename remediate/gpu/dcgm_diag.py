"""`dcgmi diag -r LEVEL -j`: DCGM's own diagnostic, run when DCGM is installed on the node, its JSON judged.

DCGM Diagnostics (formerly NVVS) level 1 checks the deployment (driver, NVML, CUDA, persistence,
pending page retirements) in up to about a minute; level 2 adds PCIe, memory and a short compute run (a few
minutes); level 3 the stress tests (about 15-30 minutes). It needs DCGM's host engine (nv-hostengine)
on the node. A node without `dcgmi` on PATH gets a "skipped" result saying so, never a failure: DCGM is
optional. Anything else that keeps the diagnostic from answering (no host engine, a timeout, output that
is not its JSON) is a "fail" with the reason: a gate must not pass a node whose diagnostic did not run. A
timeout is also marked `timed_out`: no verdict on the hardware, only too little time (gpu.health then says the
gate could not run, not that the node failed).

Two JSON shapes exist, both parsed: DCGM 4's top key "DCGM Diagnostic" (results per entity:
`entity_group`, `entity_id`, `status`, `warnings: [{warning, error_id, ...}]`, and a `test_summary`;
NVIDIA/DCGM testing/python3/dcgm_diag_schema.json) and DCGM 3's "DCGM GPU Diagnostic" (results per
`gpu_ids`, `warnings` as a list of `{warning, error_id}`).

The command is fixed argv (the level is an int checked here), no shell, with a timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LEVELS = (1, 2, 3)
ALLOWED_S = {1: 5 * 60.0, 2: 20 * 60.0, 3: 60 * 60.0}
"""The time a diagnostic at each level is given to answer, above the docstring's figures (level 3 on 8 GPUs
takes 30 minutes and more): what the release gate's margin beyond its soak is sized from."""
TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


@dataclass(frozen=True)
class DiagTest:
    """One test of the diagnostic: its verdict and, for each GPU it failed or warned on, DCGM's words."""

    category: str
    name: str
    status: str
    """DCGM's word: Pass, Fail, Warn, Skip (or what a newer release says)."""
    problems: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        lowered = self.status.lower()
        return "fail" if lowered == "fail" else ("warn" if lowered.startswith("warn") else "ok")

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "test": self.name, "status": self.status, "problems": list(self.problems)}


@dataclass(frozen=True)
class DiagResult:
    """The diagnostic's outcome: ok / warn / fail / skipped, the tests, and why when it did not run."""

    level: int
    verdict: str
    tests: tuple[DiagTest, ...] = ()
    reason: str = ""
    version: str = ""
    timed_out: bool = False
    """It gave no answer in its time: the verdict is "fail" (nothing passes), but it says nothing of the GPUs."""

    def to_dict(self) -> dict[str, Any]:
        failed = [f"{t.name}: {'; '.join(t.problems) or t.status}" for t in self.tests if t.verdict == "fail"]
        return {
            "level": self.level,
            "verdict": self.verdict,
            "reason": self.reason,
            "dcgm_version": self.version,
            "failed": failed,
            "tests": [t.to_dict() for t in self.tests],
        } | ({"timed_out": True} if self.timed_out else {})


class DiagOutputError(ValueError):
    """What dcgmi printed is not the diagnostic's JSON."""


def argv(dcgmi: str, level: int) -> list[str]:
    """The command line (`dcgmi` an absolute path found on PATH; `level` one of LEVELS)."""
    if isinstance(level, bool) or level not in LEVELS:
        raise ValueError(f"dcgmi diag level must be one of {LEVELS}, got {level!r}")
    return [dcgmi, "diag", "-r", str(level), "-j"]


def find_dcgmi() -> str | None:
    """The path of `dcgmi` on this node's PATH; None where DCGM is not installed."""
    return shutil.which("dcgmi")


def run(level: int, *, timeout_s: float) -> DiagResult:
    """Run the diagnostic at `level` and judge it; "skipped" when DCGM is not installed."""
    dcgmi = find_dcgmi()
    if dcgmi is None:
        return DiagResult(level, "skipped", reason="DCGM not installed (no dcgmi on this node's PATH)")
    command = argv(dcgmi, level)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        reason = f"dcgmi diag -r {level} gave no answer in {timeout_s:g} s"
        return DiagResult(level, "fail", reason=reason, timed_out=True)
    except OSError as exc:
        return DiagResult(level, "fail", reason=f"dcgmi could not be run: {exc}")
    # dcgmi exits non-zero when a test fails, and prints the JSON all the same: judge the JSON first.
    try:
        return parse(done.stdout, level)
    except DiagOutputError as exc:
        said = " ".join((done.stdout + " " + done.stderr).split())[:500]
        return DiagResult(level, "fail", reason=f"dcgmi diag exited {done.returncode}: {exc}: {said}")


def parse(text: str, level: int) -> DiagResult:
    """Judge `dcgmi diag -j` output; DiagOutputError when it is not the diagnostic's JSON."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise DiagOutputError("no JSON in its output")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise DiagOutputError(f"its JSON does not parse ({exc.msg} at {exc.pos})") from None
    diag = next((data[k] for k in TOP_KEYS if isinstance(data, dict) and isinstance(data.get(k), dict)), None)
    if diag is None:
        raise DiagOutputError(f"no {' or '.join(repr(k) for k in TOP_KEYS)} object")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    version = str(metadata.get("version") or data.get("version") or diag.get("version") or "")
    tests = tuple(
        _test(str(category.get("category", "")), test)
        for category in _dicts(diag.get("test_categories"))
        for test in _dicts(category.get("tests"))
    )
    runtime_error = diag.get("runtime_error")
    if runtime_error:
        return DiagResult(level, "fail", tests, reason=f"DCGM runtime error: {runtime_error}", version=version)
    if not tests:
        raise DiagOutputError("the diagnostic reports no tests")
    verdicts = {t.verdict for t in tests}
    verdict = "fail" if "fail" in verdicts else ("warn" if "warn" in verdicts else "ok")
    return DiagResult(level, verdict, tests, version=version)


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _test(category: str, test: Mapping[str, Any]) -> DiagTest:
    results = _dicts(test.get("results"))
    summary = test.get("test_summary")
    statuses = [str(r.get("status", "")) for r in results]
    if isinstance(summary, dict) and summary.get("status"):
        status = str(summary["status"])
    else:
        # DCGM 3 has no summary: the worst of the per-GPU results.
        status = next((s for word in ("fail", "warn") for s in statuses if s.lower().startswith(word)), "")
        status = status or (statuses[0] if statuses else "Skip")
    problems = []
    for result in results:
        if str(result.get("status", "")).lower() in ("pass", "skip", "not run", ""):
            continue
        who = _entity(result)
        said = [str(w.get("warning", w)) if isinstance(w, dict) else str(w) for w in _list(result.get("warnings"))]
        problems.append(f"{who}: {result.get('status')}" + (f" ({'; '.join(said)})" if said else ""))
    return DiagTest(category, str(test.get("name", "")), status, tuple(problems))


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _entity(result: Mapping[str, Any]) -> str:
    if "entity_id" in result:
        return f"{result.get('entity_group', 'GPU')} {result['entity_id']}"
    if "gpu_ids" in result or "gpu_id" in result:
        return f"GPU {result.get('gpu_ids', result.get('gpu_id'))}"
    return "node"
