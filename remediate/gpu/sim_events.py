"""The simulator's GPU fault events (the `open_events` capability of remediate.gpu.simulator.SimulatedBackend).

Events live in a file beside the device file, `<device file>.events`, one JSON object a line:
{"kind": "xid", "uuid": "GPU-...", "xid": 79} (kind: xid or double_bit_ecc). `SimulatedBackend.inject_event`
appends one; any process may, as a driver's fault reaches every NVML client. A watch delivers only the events
appended after it opened, as NVML delivers only events after registration. `wait` polls the file (every
POLL_SECONDS) until its timeout. A lost GPU is the device file's `lost: true`, as for every other call.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from remediate.gpu import simfile
from remediate.gpu.events import DOUBLE_BIT_ECC, DOUBLE_BIT_ECC_XID, XID, GpuEvent

POLL_SECONDS = 0.02
INJECTABLE = (XID, DOUBLE_BIT_ECC)


def events_path(device_file: Path) -> Path:
    return device_file.with_name(device_file.name + ".events")


def append_event(device_file: Path, line: dict[str, object]) -> None:
    """Append one event line (one write of a whole line with O_APPEND: readers never see half of it)."""
    with events_path(device_file).open("a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


class SimEventWatch:
    """EventWatch over the simulator's files; built by SimulatedBackend.open_events."""

    def __init__(self, device_file: Path) -> None:
        self.device_file = device_file
        self.path = events_path(device_file)
        with simfile.transaction(device_file) as state:
            self._index = {d.info.uuid: d.info.index for d in state.devices}
        self.registered = {uuid: INJECTABLE for uuid in self._index}
        self._offset = self.path.stat().st_size if self.path.exists() else 0
        self._pending: list[GpuEvent] = []

    def wait(self, timeout: float) -> GpuEvent | None:
        deadline = time.monotonic() + timeout
        while True:
            if not self._pending:
                self._read_new()
            if self._pending:
                return self._pending.pop(0)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(POLL_SECONDS, left))

    def _read_new(self) -> None:
        try:
            with self.path.open("rb") as stream:
                stream.seek(self._offset)
                data = stream.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self._offset += len(complete)
        at = time.time()
        for raw in complete.splitlines():
            line = json.loads(raw)
            kind, uuid = line["kind"], line["uuid"]
            xid = DOUBLE_BIT_ECC_XID if kind == DOUBLE_BIT_ECC else int(line["xid"])
            self._pending.append(GpuEvent(kind=kind, uuid=uuid, index=self._index.get(uuid), xid=xid, at=at))

    def lost(self) -> list[tuple[str, int]]:
        with simfile.transaction(self.device_file) as state:
            return [(d.info.uuid, d.info.index) for d in state.devices if d.lost]

    def close(self) -> None:
        """Nothing to free."""
