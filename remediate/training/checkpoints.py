"""Checkpoints a rollback can go back to: an index of (step, loss, good mark), and two stores built on it.

- `TorchCheckpoints`: a small helper for plain PyTorch. It saves the state dicts of a
  model, its optimizers and schedulers (plus anything `extra_state` returns) with
  ``torch.save`` every time you call ``save(step, loss)``, keeps the last ``keep`` of them
  (and always the newest one marked good), and restores them on a rollback.
- `CallableCheckpoints`: for jobs with their own checkpointing. You pass ``save(step)``
  (returns the path it wrote, or None) and ``load(info)`` callables; `record` adds a
  checkpoint you made on your own schedule.

A checkpoint is *good* when its loss is known, finite, (with ``good_loss_below``) below that
threshold, and not above ``max_loss_ratio`` (default 3) times the median loss of the newest
good checkpoints before it (the last ``ratio_window``, default 5) — so a checkpoint saved during
a loss spike is not good even without a threshold; or as an ``is_good(step, loss)`` callable decides. The index is
a JSON file next to the checkpoints (``index.json``), written atomically, so a restarted
job finds its checkpoints again. `TrainingControl` publishes it in ``job.json`` so that
remediate's dry-run can say which checkpoint a rollback would use.

Checkpoints belong to a *run*: every process that opens the index starts a new run (``run_id``)
unless it continues an earlier one's lineage — ``resume()`` (load the newest checkpoint the last run
left), ``load(info)`` of an earlier run's checkpoint, or ``continue_from(step)`` for a job restored by
other means. The run's *lineage* is its own checkpoints plus, for each run it continues from, that
run's checkpoints up to the step it continued from. Listing, rollback, the good mark and retention
consider the current lineage only: a job restarted from scratch in the same directory keeps its new
checkpoints (the abandoned run's age out as they are replaced) and never rolls back into the
abandoned run. Entries of older indexes (no run) are a lineage of their own.

torch is imported only inside `TorchCheckpoints.save`/`load`.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from remediate.training.files import atomic_write_json, read_json
from remediate.training.placement import from_environment
from remediate.training.protocol import CheckpointInfo, ProtocolError

INDEX_FILE = "index.json"
DEFAULT_MAX_LOSS_RATIO = 3.0
"""A checkpoint whose loss is above this many times the median of the recent good ones is not good
(the same factor as the shipped TrainingLossSpike rule)."""
DEFAULT_RATIO_WINDOW = 5
Listener = Callable[[list[CheckpointInfo]], None]
_Chain = list[tuple[str | None, float]]
"""A lineage: (run, highest step of that run in it), the current run first (its steps unbounded)."""


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def _default_writer() -> bool:
    """Rank 0 writes (torch.distributed if initialized, else the launcher's environment: torchrun's RANK or
    srun's SLURM_PROCID, remediate.training.placement)."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return bool(dist.get_rank() == 0)
    return from_environment().rank == 0


def _parent_of(run: dict[str, Any] | None) -> tuple[str | None, int] | None:
    parent = (run or {}).get("parent")
    if isinstance(parent, list) and len(parent) == 2 and isinstance(parent[1], int):
        return (parent[0] if isinstance(parent[0], str) else None, parent[1])
    return None


def _in_chain(info: CheckpointInfo, chain: _Chain) -> bool:
    return any(info.run == run and info.step <= limit for run, limit in chain)


def _all_finite(tensors: Iterable[Any]) -> bool:
    """Whether every floating-point tensor is all finite: one read per device, not one per tensor (a GPU sync each)."""
    import torch

    per_device: dict[Any, list[Any]] = {}
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel():
            per_device.setdefault(tensor.device, []).append(torch.isfinite(tensor).all())
    return all(bool(torch.stack(flags).all()) for flags in per_device.values())


class CheckpointIndex:
    """The list of a job's checkpoints, kept in ``<directory>/index.json``, with retention and the good mark."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int | None = 5,
        good_loss_below: float | None = None,
        is_good: Callable[[int, float | None], bool] | None = None,
        writer: bool | None = None,
        delete: Callable[[CheckpointInfo], None] | None = None,
        max_loss_ratio: float | None = DEFAULT_MAX_LOSS_RATIO,
        ratio_window: int = DEFAULT_RATIO_WINDOW,
    ) -> None:
        if keep is not None and keep < 1:
            raise ValueError("keep must be at least 1 (or None: keep every checkpoint)")
        if max_loss_ratio is not None and not (math.isfinite(max_loss_ratio) and max_loss_ratio > 0):
            raise ValueError("max_loss_ratio must be a finite number > 0 (or None: no relative test)")
        if ratio_window < 1:
            raise ValueError("ratio_window must be at least 1")
        self.directory = Path(directory)
        self.keep = keep
        self.good_loss_below = good_loss_below
        self.max_loss_ratio = max_loss_ratio
        self.ratio_window = ratio_window
        self._is_good = is_good
        self.writer = _default_writer() if writer is None else writer
        self._delete = delete
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._entries: list[CheckpointInfo] | None = None
        self._index_key: tuple[int, int] | None = None
        self.run_id = f"{int(time.time())}-{secrets.token_hex(4)}"
        """This process's run of the job (a writer's; other ranks follow the run the index file names)."""
        self._parent: tuple[str | None, int] | None = None
        """(run, step) this run continues from; None: it started from scratch."""
        self._runs: dict[str, dict[str, Any]] = {}
        """Every run the index file knows -> {"parent": [run, step] | None, "started_at": t}."""
        self._file_current: str | None = None
        """The run the index file names as current (for readers; for a writer, the run before it until it wrote)."""
        self._previous_run: str | None = None
        self._seen_file = False
        if self.writer:
            self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def index_file(self) -> Path:
        return self.directory / INDEX_FILE

    # ---------------------------------------------------------------- good mark

    def judge(self, step: int, loss: float | None) -> bool:
        """Whether a checkpoint saved at `step` with `loss` counts as good."""
        if self._is_good is not None:
            return bool(self._is_good(step, loss))
        if loss is None or not math.isfinite(loss):
            return False
        if self.good_loss_below is not None and not loss < self.good_loss_below:
            return False
        reference = self.reference_loss(step)
        return reference is None or self.max_loss_ratio is None or loss <= self.max_loss_ratio * reference

    def reference_loss(self, step: int) -> float | None:
        """The median loss of the newest good checkpoints before `step` (None: no history to compare with).

        Only good ones count: the checkpoints saved during a spike must not raise the bar for the next.
        """
        with self._lock:
            lineage = self._lineage(self._load())
            losses = [c.loss for c in lineage if c.good and c.step < step and c.loss is not None]
        recent = sorted(v for v in losses[-self.ratio_window :] if math.isfinite(v))
        if not recent:
            return None
        middle = len(recent) // 2
        return recent[middle] if len(recent) % 2 else (recent[middle - 1] + recent[middle]) / 2

    # ---------------------------------------------------------------- the index

    def list(self) -> list[CheckpointInfo]:
        """The checkpoints of the current run's lineage, oldest first (re-read when another rank rewrote the file)."""
        with self._lock:
            return self._lineage(self._load())

    def all(self) -> list[CheckpointInfo]:
        """Every checkpoint in the index, of every run, oldest first."""
        with self._lock:
            return list(self._load())

    def get(self, step: int) -> CheckpointInfo | None:
        return next((c for c in self.list() if c.step == step), None)

    def previous(self) -> list[CheckpointInfo]:
        """The lineage of the run that last wrote the index before this process: what `resume` picks from."""
        with self._lock:
            entries = self._load()
            return [c for c in entries if _in_chain(c, self._chain_of(self._previous_run, None))]

    def resume(self, *, good: bool = False) -> CheckpointInfo | None:
        """Load the newest checkpoint (marked good, with `good`) of the previous run's lineage and continue it.

        Returns the checkpoint (carry on from its step), or None when there is none (start from scratch).
        """
        candidates = [c for c in self.previous() if c.good or not good]
        if not candidates:
            return None
        info = candidates[-1]
        self.load(info)
        return info

    def load(self, info: CheckpointInfo) -> Any:  # pragma: no cover - the subclasses restore
        raise NotImplementedError

    def continue_from(self, checkpoint: CheckpointInfo | int) -> None:
        """This run continues the lineage of `checkpoint` (a step: of the previous run's lineage) after it.

        `load` and `resume` call it; call it yourself when the job restored its state by other means
        (a framework's own resume). Only the writer records it; other ranks follow the index file.
        """
        with self._lock:
            entries = self._load()
            if isinstance(checkpoint, CheckpointInfo):
                run, step = checkpoint.run, checkpoint.step
            else:
                step = int(checkpoint)
                found = next((c for c in self.previous() if c.step == step), None)
                run = found.run if found is not None else self._previous_run
            if not self.writer or run == self.run_id:
                return  # a rollback inside this run: discard_after drops what follows
            self._parent = (run, step)
            self._store(entries)
            kept = self._lineage(entries)
        self._notify(kept)

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(checkpoints)` whenever the index changes (TrainingControl publishes it in job.json)."""
        self._listeners.append(listener)

    def record(self, info: CheckpointInfo) -> CheckpointInfo:
        """Add (or replace, same step) a checkpoint; apply retention; persist; tell the listeners."""
        if info.run is None and self.writer:
            info = replace(info, run=self.run_id)
        with self._lock:
            entries = [c for c in self._load() if c.step != info.step] + [info]
            entries.sort(key=lambda c: c.step)
            kept = self._retain(entries)
            self._store(kept)
            removed = [c for c in entries if c not in kept]
            lineage = self._lineage(kept)
        for old in removed:
            self._remove(old)
        self._notify(lineage)
        return info

    def discard_after(self, step: int) -> list[CheckpointInfo]:
        """Forget (and delete) checkpoints newer than `step`: after a rollback they belong to the abandoned run."""
        if not self.writer:
            return [c for c in self.list() if c.step > step]
        with self._lock:
            entries = self._load()
            gone = [c for c in self._lineage(entries) if c.step > step]
            if not gone:
                return []
            kept = [c for c in entries if c not in gone]
            self._store(kept)
            lineage = self._lineage(kept)
        for old in gone:
            self._remove(old)
        self._notify(lineage)
        return gone

    def _retain(self, entries: list[CheckpointInfo]) -> list[CheckpointInfo]:
        """The newest `keep` of the current lineage (and its newest good one); other runs' fill what is left.

        A restarted job's new checkpoint is never the one dropped for an abandoned run's higher step numbers;
        the abandoned run's checkpoints go, newest last, as the new run's take their places.
        """
        if self.keep is None or len(entries) <= self.keep:
            return entries
        lineage = self._lineage(entries)
        kept = lineage[-self.keep :]
        good = [c for c in lineage if c.good]
        if good and good[-1] not in kept:
            kept = [good[-1], *kept]  # never lose the last good checkpoint to a run of bad ones
        others = sorted((c for c in entries if c not in lineage), key=lambda c: (c.saved_at, c.step))
        room = self.keep - len(kept)
        if room > 0:
            kept += others[-room:]
        return sorted(kept, key=lambda c: c.step)

    # ---------------------------------------------------------------- runs

    def _chain_of(self, run: str | None, parent: tuple[str | None, int] | None) -> _Chain:
        """The lineage of `run` (continuing `parent`, else what the index file says it continues)."""
        chain: _Chain = [(run, math.inf)]
        if parent is None and run is not None:
            parent = _parent_of(self._runs.get(run))
        limit = math.inf
        seen = {run}
        while parent is not None:
            run, step = parent
            limit = min(limit, step)
            chain.append((run, limit))
            if run in seen or run is None:
                break
            seen.add(run)
            parent = _parent_of(self._runs.get(run))
        return chain

    def _chain(self) -> _Chain:
        if self.writer:
            return self._chain_of(self.run_id, self._parent)
        return self._chain_of(self._file_current, None)

    def _lineage(self, entries: Iterable[CheckpointInfo]) -> list[CheckpointInfo]:
        chain = self._chain()
        return [c for c in entries if _in_chain(c, chain)]

    def _load(self) -> list[CheckpointInfo]:
        try:
            info = os.stat(self.index_file)
        except FileNotFoundError:
            if self._entries is None or not self.writer:
                self._entries = []
            return self._entries
        key = (info.st_mtime_ns, info.st_size)
        if self._entries is None or (key != self._index_key and not self.writer):
            try:
                data = read_json(self.index_file)
                if not isinstance(data, dict):
                    data = {}
                entries = data.get("checkpoints", [])
                self._entries = sorted((CheckpointInfo.from_dict(c) for c in entries), key=lambda c: c.step)
                runs = data.get("runs")
                runs = runs if isinstance(runs, dict) else {}
                self._runs = {str(k): v for k, v in runs.items() if isinstance(v, dict)}
                current = data.get("current")
                self._file_current = current if isinstance(current, str) else None
                if not self._seen_file:
                    self._seen_file = True
                    self._previous_run = self._file_current
            except (ProtocolError, FileNotFoundError):
                self._entries = self._entries or []
            self._index_key = key
        return self._entries

    def _store(self, entries: list[CheckpointInfo]) -> None:
        self._entries = list(entries)
        if not self.writer:
            return
        self._seen_file = True  # from now on the file's current run is this one
        parent = None if self._parent is None else list(self._parent)
        started = self._runs.get(self.run_id, {}).get("started_at", time.time())
        self._runs[self.run_id] = {"parent": parent, "started_at": started}
        self._file_current = self.run_id
        # Only runs still referenced: an entry's run, or an ancestor of the current one.
        wanted = {c.run for c in entries} | {run for run, _ in self._chain()}
        self._runs = {k: v for k, v in self._runs.items() if k in wanted}
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            self.index_file,
            {
                "version": 1,
                "checkpoints": [c.to_dict() for c in entries],
                "runs": self._runs,
                "current": self.run_id,
            },
        )
        with contextlib.suppress(OSError):
            info = os.stat(self.index_file)
            self._index_key = (info.st_mtime_ns, info.st_size)

    def _remove(self, info: CheckpointInfo) -> None:
        if not self.writer:
            return
        if self._delete is not None:
            self._delete(info)
        elif info.path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(info.path)

    def _notify(self, entries: Iterable[CheckpointInfo]) -> None:
        snapshot = list(entries)
        for listener in self._listeners:
            listener(snapshot)


class TorchCheckpoints(CheckpointIndex):
    """Checkpoints of plain PyTorch state dicts: model, optimizers, schedulers, and your `extra_state()`.

    ``save(step, loss)`` writes ``<directory>/ckpt-<step>.pt`` (temp file + rename) on the
    writing rank (rank 0 by default; pass ``writer=True`` on every rank when each rank keeps
    its own directory) and keeps the last ``keep``. ``load(info)`` restores everything in
    place on every rank (``map_location`` defaults to the CPU; optimizers move their state
    to their parameters' device themselves).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        model: Any = None,
        optimizer: Any = None,
        scheduler: Any = None,
        extra_state: Callable[[], Any] | None = None,
        load_extra_state: Callable[[Any], None] | None = None,
        map_location: Any = "cpu",
        weights_only: bool = True,
        prefix: str = "ckpt",
        **index: Any,
    ) -> None:
        """`index`: how the index keeps and judges checkpoints (`CheckpointIndex`: keep, default 5,
        good_loss_below, is_good, writer, max_loss_ratio, ratio_window)."""
        super().__init__(directory, **index)
        self.model = model
        self.optimizers = as_list(optimizer)
        self.schedulers = as_list(scheduler)
        self.extra_state = extra_state
        self.load_extra_state = load_extra_state
        self.map_location = map_location
        self.weights_only = weights_only
        self.prefix = prefix

    def attach(self, *, model: Any = None, optimizer: Any = None, scheduler: Any = None) -> None:
        """Set what is saved and restored (frameworks create optimizers after the callback exists)."""
        if model is not None:
            self.model = model
        if optimizer is not None:
            self.optimizers = as_list(optimizer)
        if scheduler is not None:
            self.schedulers = as_list(scheduler)

    def path_for(self, step: int) -> Path:
        return self.directory / f"{self.prefix}-{step:09d}.pt"

    def save(self, step: int, loss: float | None = None, *, good: bool | None = None) -> CheckpointInfo:
        loss = None if loss is None else float(loss)
        path = self.path_for(step)
        info = CheckpointInfo(
            step=step,
            loss=loss,
            good=self.judge(step, loss) if good is None else good,
            path=str(path),
            saved_at=time.time(),
            run=self.run_id,
        )
        if not self.writer:
            return info
        import torch

        if self.model is None:
            raise ValueError("TorchCheckpoints has no model to save (pass model=... or call attach())")
        weights = self.model.state_dict()
        if good is None and info.good and not _all_finite(weights.values()):
            # NaN/Inf weights are never worth restoring, whatever the loss said (e.g. one a framework filtered).
            info = replace(info, good=False)
        state = {
            "step": step,
            "loss": loss,
            "model": weights,
            "optimizers": [o.state_dict() for o in self.optimizers],
            "schedulers": [s.state_dict() for s in self.schedulers],
            "extra": self.extra_state() if self.extra_state is not None else None,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            torch.save(state, tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return self.record(info)

    def load(self, info: CheckpointInfo) -> Any:
        """Restore model, optimizers and schedulers from `info`; returns the extra state."""
        import torch

        if not info.path:
            raise FileNotFoundError(f"checkpoint of step {info.step} has no path")
        state = torch.load(info.path, map_location=self.map_location, weights_only=self.weights_only)
        if self.model is None:
            raise ValueError("TorchCheckpoints has no model to restore (pass model=... or call attach())")
        self.model.load_state_dict(state["model"])
        saved_optimizers, saved_schedulers = state.get("optimizers", []), state.get("schedulers", [])
        if len(saved_optimizers) != len(self.optimizers) or len(saved_schedulers) != len(self.schedulers):
            raise ValueError(
                f"checkpoint of step {info.step} has {len(saved_optimizers)} optimizer(s) and "
                f"{len(saved_schedulers)} scheduler(s); this job has {len(self.optimizers)} and {len(self.schedulers)}"
            )
        for optimizer, saved in zip(self.optimizers, saved_optimizers, strict=True):
            optimizer.load_state_dict(saved)
        for scheduler, saved in zip(self.schedulers, saved_schedulers, strict=True):
            scheduler.load_state_dict(saved)
        if self.load_extra_state is not None:
            self.load_extra_state(state.get("extra"))
        self.continue_from(info)
        return state.get("extra")


class CallableCheckpoints(CheckpointIndex):
    """Your own checkpointing behind the same interface: ``save(step) -> path | None``, ``load(info)``.

    The index lives in `directory` (``index.json``). Checkpoints you write on your own schedule
    are added with ``record_checkpoint(step, loss, path)``. Pruned entries are passed to
    ``delete(info)`` when given; otherwise your files are left alone and only the index forgets them.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        save: Callable[[int], str | os.PathLike[str] | None],
        load: Callable[[CheckpointInfo], Any],
        delete: Callable[[CheckpointInfo], None] | None = None,
        keep: int | None = None,
        **index: Any,
    ) -> None:
        """`index`: how the index judges checkpoints (`CheckpointIndex`: good_loss_below, is_good, writer,
        max_loss_ratio, ratio_window); `keep` defaults to every checkpoint."""
        super().__init__(directory, keep=keep, delete=delete or (lambda info: None), **index)
        self._save = save
        self._load_fn = load

    def save(self, step: int, loss: float | None = None, *, good: bool | None = None) -> CheckpointInfo:
        path = self._save(step)
        return self.record_checkpoint(step, loss, path, good=good)

    def record_checkpoint(
        self,
        step: int,
        loss: float | None = None,
        path: str | os.PathLike[str] | None = None,
        *,
        good: bool | None = None,
    ) -> CheckpointInfo:
        loss = None if loss is None else float(loss)
        info = CheckpointInfo(
            step=step,
            loss=loss,
            good=self.judge(step, loss) if good is None else good,
            path=None if path is None else str(path),
            saved_at=time.time(),
        )
        return self.record(info)

    def load(self, info: CheckpointInfo) -> Any:
        loaded = self._load_fn(info)
        self.continue_from(info)
        return loaded
