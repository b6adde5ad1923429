"""One pynvml call whose answer a GPU or driver may not have: the shared shape of NVML's optional reads.

The NVML backend (remediate.gpu.nvml) and its health reads (remediate.gpu.nvml_health) both read values
that some GPUs or drivers cannot give (a power draw, a clock, an ECC counter, a newer getter): such a
read is None, never a failed device. "Cannot give" is NVML answering NOT_SUPPORTED or FUNCTION_NOT_FOUND,
or pynvml raising NVMLLibraryMismatchError (not an NVMLError) for an unversioned function the installed
driver lacks. Its own module so that both import it: remediate.gpu.nvml imports nvml_health.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from remediate.gpu.errors import NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED, from_nvml_error

ABSENT_CODES = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND})
"""NVML's codes for "this GPU or driver cannot tell you that"."""


def mismatch_error(nvml: ModuleType) -> type[BaseException] | tuple[()]:
    """pynvml's error for a function missing from the driver; an empty tuple (which catches nothing) where the
    installed nvidia-ml-py has none: not every release that pyproject allows defines it."""
    return getattr(nvml, "NVMLLibraryMismatchError", ())


def optional(nvml: ModuleType, doing: str, fn: Callable[..., Any], *args: Any) -> Any | None:
    """fn(*args); None where the GPU or driver cannot answer it (the module docstring), a GpuError naming
    `doing` for any other NVML failure."""
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        if exc.value in ABSENT_CODES:
            return None
        raise from_nvml_error(exc, doing=doing) from exc
    except mismatch_error(nvml):
        return None


def text(value: str | bytes) -> str:
    """A string pynvml returned: most are decoded, but struct fields and older releases hand back bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
