"""GPU errors: NVML's return codes as named exceptions that say what to do next.

Both backends raise these (the NVML backend through `from_nvml_error`, the
simulator through `error_for_code`), so an action, the executor and the audit
history see the same error whichever backend ran. Every `GpuError` keeps NVML's
return code in `.code` (None when the failure did not come from NVML).

    ActionError
    └── GpuError
        ├── GpuNoPermission       4   needs root / CAP_SYS_ADMIN
        ├── GpuNotSupported       3   (and 13: function missing from this driver)
        ├── GpuInvalidArgument    2   e.g. a limit outside the device's constraints
        ├── GpuLost              15   the GPU fell off the bus
        ├── GpuNotFound           6   (and 28) no such GPU on this node
        ├── NvmlUnavailable       1, 9, 12, 18   no usable NVML/driver here
        ├── GpuResetRefused       a GPU reset refused before it was tried (processes, MIG, NVLink)
        └── RetryableGpuError    10, 19, 27, 999 (also a RetryableActionError: the executor retries it)
    ParamsError
    └── GpuSelectionError         a GPU reference (from an alert label) that fits no accepted form

The codes are copied from nvidia-ml-py's constants (a test checks they match)
so that this module never imports pynvml: importing it must stay cheap and work
on machines without the package or a driver.
"""

from __future__ import annotations

from typing import ClassVar

from remediate.errors import ActionError, ParamsError, RetryableActionError

# NVML return codes (nvml.h `nvmlReturn_t`), the ones this package treats specially.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_UNKNOWN = 999

# NVML's own wording (pynvml's NVMLError._errcode_to_string), so messages read the same
# whether the error came from the driver or from the simulator.
NVML_ERROR_TEXT: dict[int, str] = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_IN_USE: "In Use",
    NVML_ERROR_NOT_READY: "Not Ready",
    NVML_ERROR_GPU_NOT_FOUND: "GPU Not Found",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class GpuError(ActionError):
    """The GPU operation failed."""

    default_code: ClassVar[int | None] = None
    advice: ClassVar[str] = ""
    """What to do next; appended to messages built by `error_for_code`."""

    def __init__(self, message: str | None = None, *, code: int | None = None) -> None:
        self.code = code if code is not None else self.default_code
        super().__init__(message)


class GpuNoPermission(GpuError):
    """Changing a GPU setting needs root (or CAP_SYS_ADMIN) on the node."""

    default_code = NVML_ERROR_NO_PERMISSION
    advice = (
        "changing a GPU setting (power limit, clocks) needs root or CAP_SYS_ADMIN on the node: run the remediate "
        "agent as root (in Kubernetes: a privileged container or the SYS_ADMIN capability)"
    )


class GpuNotSupported(GpuError):
    """The GPU or its driver does not support this operation."""

    default_code = NVML_ERROR_NOT_SUPPORTED
    advice = "this GPU or driver does not support the operation (consumer GPUs and some VMs cannot change power limits)"


class BackendNotSupported(GpuNotSupported):
    """The GPU backend in use has no method for this operation (see `remediate.gpu.backend.capability`)."""

    advice = "this GPU backend cannot do it: choose another action, or run it where the backend supports it"


class GpuInvalidArgument(GpuError):
    """NVML rejected the value (e.g. a power limit outside the device's constraints)."""

    default_code = NVML_ERROR_INVALID_ARGUMENT
    advice = "the value is outside what the device accepts: check its power-limit constraints or supported clocks"


class GpuLost(GpuError):
    """The GPU is lost (fell off the bus); it needs a reset or a reboot."""

    default_code = NVML_ERROR_GPU_IS_LOST
    advice = "the GPU has fallen off the bus: drain the node and reset the GPU or reboot; retrying will not help"


class GpuNotFound(GpuError):
    """No such GPU on this node."""

    default_code = NVML_ERROR_NOT_FOUND
    advice = "no GPU on this node matches: check the alert's GPU label against `remediate gpu status`"


class NvmlUnavailable(GpuError):
    """NVML is not usable on this machine: the NVIDIA driver or libnvidia-ml.so.1 is missing or not loaded."""

    advice = (
        "the NVIDIA driver / NVML library (libnvidia-ml.so.1) is missing or not loaded on this machine; "
        "on a GPU node install or load the driver (in a container the NVIDIA container toolkit must mount it). "
        "For tests and demos select the simulated GPU backend explicitly: remediate never falls back to it"
    )


class GpuResetRefused(GpuError):
    """A GPU reset was refused before anything was tried: compute processes on the GPU, MIG instances,
    or active NVLinks. Permanent: the step fails with the reason, it is not retried."""

    advice = "drain the node (no process may use the GPU), destroy MIG instances, and reset again"


class RetryableGpuError(GpuError, RetryableActionError):
    """The GPU operation failed transiently; trying again may succeed."""

    advice = "a transient NVML failure: the step is retried"


class GpuSelectionError(ParamsError):
    """The GPU reference fits none of the accepted forms."""


# code -> (class, advice overriding the class's own where the code needs its own words)
_CODE_MAP: dict[int, tuple[type[GpuError], str | None]] = {
    NVML_ERROR_NO_PERMISSION: (GpuNoPermission, None),
    NVML_ERROR_NOT_SUPPORTED: (GpuNotSupported, None),
    NVML_ERROR_FUNCTION_NOT_FOUND: (
        GpuNotSupported,
        "the installed driver's NVML lacks this function: upgrade the driver or use an older nvidia-ml-py",
    ),
    NVML_ERROR_INVALID_ARGUMENT: (GpuInvalidArgument, None),
    NVML_ERROR_GPU_IS_LOST: (GpuLost, None),
    NVML_ERROR_NOT_FOUND: (GpuNotFound, None),
    NVML_ERROR_GPU_NOT_FOUND: (GpuNotFound, None),
    NVML_ERROR_UNINITIALIZED: (NvmlUnavailable, None),
    NVML_ERROR_DRIVER_NOT_LOADED: (NvmlUnavailable, None),
    NVML_ERROR_LIBRARY_NOT_FOUND: (NvmlUnavailable, None),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        NvmlUnavailable,
        "the NVML library and the loaded kernel driver have different versions (driver upgraded without reload): "
        "reboot the node or reload the nvidia kernel modules",
    ),
    NVML_ERROR_RESET_REQUIRED: (GpuError, "the GPU needs a reset: drain the node and reset the GPU or reboot"),
    NVML_ERROR_TIMEOUT: (RetryableGpuError, None),
    NVML_ERROR_IN_USE: (RetryableGpuError, None),
    NVML_ERROR_NOT_READY: (RetryableGpuError, None),
    NVML_ERROR_UNKNOWN: (RetryableGpuError, None),
}


def error_for_code(code: int | None, *, doing: str = "", text: str | None = None, detail: str = "") -> GpuError:
    """Build the GpuError NVML's `code` means.

    `doing` says what failed ("set the power limit of GPU-… to 560000 mW"), `text` is NVML's wording of the
    code (default: ours), `detail` what is known beyond the code ("outside 200000..700000 mW").
    """
    cls, advice = _CODE_MAP.get(code, (GpuError, None)) if code is not None else (GpuError, None)
    if text is None:
        text = NVML_ERROR_TEXT.get(code, "unknown NVML error") if code is not None else "NVML failed"
    what = f"{doing} failed" if doing else "NVML call failed"
    where = f"NVML error {code} ({text})" if code is not None else text
    if detail:
        where += f": {detail}"
    hint = advice or cls.advice
    message = f"{what}: {where}" + (f"; {hint}" if hint else "")
    return cls(message, code=code)


def from_nvml_error(exc: BaseException, *, doing: str = "") -> GpuError:
    """Map a pynvml.NVMLError (by its `.value`) to the matching GpuError, chained to the original.

    Duck-typed on `.value` so that this module never imports pynvml. The result has
    `__cause__` set, so even a bare `raise from_nvml_error(exc)` keeps NVML's traceback.
    """
    raw = getattr(exc, "value", None)
    code = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    try:
        text = str(exc) or type(exc).__name__
    except Exception:  # pynvml's __str__ calls into the library for unknown codes
        text = type(exc).__name__
    error = error_for_code(code, doing=doing, text=text)
    error.__cause__ = exc
    error.__suppress_context__ = True
    return error
