"""Which GPU an alert means: parse a GPU reference taken from a label, then find it on a backend.

The gpu actions call `parse_gpu_ref` while validating params (a value that fits
no form is a GpuSelectionError, a ParamsError: nothing runs) and `resolve` when
planning or executing. Values come from alert labels (dcgm-exporter's `gpu`,
`UUID`, `pci_bus_id`) or from the playbook (`all`), so the forms are strict
regexes over ASCII, anchored at both ends, with no trimming or guessing:

    index   "3"                      dcgm-exporter `gpu`; decimal, no sign, no leading zeros
    uuid    "GPU-5f6ac2e3-…"         dcgm-exporter `UUID`; any case -> "GPU-<lower-case>"
    pci     "00000000:3B:00.0"       dcgm-exporter `pci_bus_id`; also "0000:3b:00.0", "3b:00.0", "3B:00"
    mig     "MIG-<uuid>"             a MIG device (R470+ drivers), resolved to its parent GPU
            "MIG-GPU-<uuid>/1/0"     the older MIG form, which names its parent GPU itself
    all     "all"                    every GPU of the node; only written in the playbook: a value
                                     rendered from an alert must name one GPU (actions/gpu.py)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from remediate.gpu.errors import GpuError, GpuNotFound, GpuSelectionError
from remediate.gpu.pci import normalize_pci_bus_id

if TYPE_CHECKING:
    from remediate.gpu.backend import GpuBackend
    from remediate.gpu.model import GpuInfo

GpuRefKind = Literal["index", "uuid", "pci", "mig", "all"]

ACCEPTED_FORMS = (
    "a GPU index (3), a GPU UUID (GPU-5f6ac2e3-2f4b-13d2-80f4-5e4d9c3e8d2a), "
    "a PCI bus id (00000000:3B:00.0, 0000:3b:00.0, 3b:00.0), "
    "a MIG device UUID (MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>), or all"
)
_MAX_SHOWN = 80  # a label can be long; error messages quote only its start

_HEX_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
_INDEX_RE = re.compile(r"0|[1-9][0-9]{0,3}", re.ASCII)
_GPU_UUID_RE = re.compile(rf"[Gg][Pp][Uu]-(?P<hex>{_HEX_UUID})", re.ASCII)
_MIG_UUID_RE = re.compile(rf"[Mm][Ii][Gg]-(?P<hex>{_HEX_UUID})", re.ASCII)
_MIG_OLD_RE = re.compile(
    rf"[Mm][Ii][Gg]-[Gg][Pp][Uu]-(?P<hex>{_HEX_UUID})/(?P<gi>0|[1-9][0-9]?)/(?P<ci>0|[1-9][0-9]?)", re.ASCII
)


@dataclass(frozen=True)
class GpuRef:
    """A parsed GPU reference; `value` is normalised (canonical UUID / PCI id, decimal index, "all")."""

    kind: GpuRefKind
    value: str

    def __str__(self) -> str:
        return self.value


def _shown(text: object) -> str:
    shown = repr(text)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."


def parse_gpu_ref(text: str) -> GpuRef:
    """Parse a GPU reference; GpuSelectionError (listing the accepted forms) if it fits none."""
    if not isinstance(text, str):
        raise GpuSelectionError(f"GPU reference must be a string, got {type(text).__name__}: expected {ACCEPTED_FORMS}")
    if text == "all":
        return GpuRef("all", "all")
    if _INDEX_RE.fullmatch(text):
        return GpuRef("index", text)
    if match := _GPU_UUID_RE.fullmatch(text):
        return GpuRef("uuid", "GPU-" + match["hex"].lower())
    if match := _MIG_UUID_RE.fullmatch(text):
        return GpuRef("mig", "MIG-" + match["hex"].lower())
    if match := _MIG_OLD_RE.fullmatch(text):
        return GpuRef("mig", f"MIG-GPU-{match['hex'].lower()}/{match['gi']}/{match['ci']}")
    try:
        return GpuRef("pci", normalize_pci_bus_id(text))
    except ValueError:
        pass
    raise GpuSelectionError(f"not a GPU reference: {_shown(text)}; expected {ACCEPTED_FORMS}")


def resolve(ref: GpuRef, backend: GpuBackend) -> list[GpuInfo]:
    """The GPUs `ref` means on this node, read now. GpuNotFound (listing the node's GPUs) if there is none.

    A MIG device resolves to its parent GPU: power limits belong to the whole GPU.
    """
    if ref.kind == "all":
        infos = backend.devices()
        if not infos:
            raise GpuNotFound("no GPUs on this node")
        return infos
    if ref.kind == "index":
        return [_only(ref, [i for i in backend.devices() if i.index == int(ref.value)], backend)]
    if ref.kind == "pci":
        return [_only(ref, [i for i in backend.devices() if i.pci_bus_id == ref.value], backend)]
    if ref.kind == "uuid":
        return [_device(backend, ref.value, f"no GPU {ref.value} on this node")]
    if ref.kind == "mig":
        return [_mig_parent(ref, backend)]
    raise GpuSelectionError(f"unknown GPU reference kind {ref.kind!r}")


def select(text: str, backend: GpuBackend) -> list[GpuInfo]:
    """parse_gpu_ref + resolve."""
    return resolve(parse_gpu_ref(text), backend)


def _mig_parent(ref: GpuRef, backend: GpuBackend) -> GpuInfo:
    old = _MIG_OLD_RE.fullmatch(ref.value)
    if old is not None:
        # The old form carries its parent: no need to ask the driver (newer drivers no longer know this form).
        parent = "GPU-" + old["hex"]
        return _device(backend, parent, f"MIG device {ref.value} belongs to GPU {parent}, which is not on this node")
    try:
        parent = backend.parent_of_mig(ref.value)
    except GpuNotFound as exc:
        raise GpuNotFound(
            f"MIG device {ref.value} is not on this node, so its GPU is unknown ({exc}); {_inventory(backend)}",
            code=exc.code,
        ) from exc
    return _device(backend, parent, f"MIG device {ref.value} belongs to GPU {parent}, which cannot be found")


def _device(backend: GpuBackend, uuid: str, missing: str) -> GpuInfo:
    try:
        return backend.device(uuid)
    except GpuNotFound as exc:
        raise GpuNotFound(f"{missing}; {_inventory(backend)}", code=exc.code) from exc


def _only(ref: GpuRef, matches: list[GpuInfo], backend: GpuBackend) -> GpuInfo:
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise GpuNotFound(f"no GPU with {ref.kind} {ref.value} on this node; {_inventory(backend)}")
    raise GpuError(f"{len(matches)} GPUs have {ref.kind} {ref.value}; the backend is inconsistent")


def _inventory(backend: GpuBackend) -> str:
    """ "GPUs here: 0 GPU-… 00000000:18:00.0, …", for messages; never raises."""
    try:
        infos = backend.devices()
    except GpuError as exc:
        return f"listing this node's GPUs failed too: {exc}"
    if not infos:
        return "this node has no GPUs"
    return "GPUs here: " + ", ".join(f"{i.index} {i.uuid} {i.pci_bus_id}" for i in infos)
