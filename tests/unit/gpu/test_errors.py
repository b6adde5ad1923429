"""NVML return codes become named GpuErrors that keep the code, chain the original and say what to do."""

from __future__ import annotations

import pickle

import pynvml
import pytest

from remediate.errors import ActionError, ParamsError, RetryableActionError
from remediate.gpu import errors as gpu_errors
from remediate.gpu.errors import (
    GpuError,
    GpuInvalidArgument,
    GpuLost,
    GpuNoPermission,
    GpuNotFound,
    GpuNotSupported,
    GpuSelectionError,
    NvmlUnavailable,
    RetryableGpuError,
    error_for_code,
    from_nvml_error,
)


def test_our_copies_of_nvml_codes_match_nvidia_ml_py() -> None:
    names = [name for name in dir(gpu_errors) if name.startswith("NVML_ERROR_") and name != "NVML_ERROR_TEXT"]
    assert len(names) >= 15
    for name in names:
        assert getattr(gpu_errors, name) == getattr(pynvml, name), name


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (pynvml.NVML_ERROR_NO_PERMISSION, GpuNoPermission),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, GpuNotSupported),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, GpuNotSupported),
        (pynvml.NVML_ERROR_INVALID_ARGUMENT, GpuInvalidArgument),
        (pynvml.NVML_ERROR_GPU_IS_LOST, GpuLost),
        (pynvml.NVML_ERROR_NOT_FOUND, GpuNotFound),
        (pynvml.NVML_ERROR_GPU_NOT_FOUND, GpuNotFound),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, NvmlUnavailable),
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, NvmlUnavailable),
        (pynvml.NVML_ERROR_UNINITIALIZED, NvmlUnavailable),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, NvmlUnavailable),
        (pynvml.NVML_ERROR_TIMEOUT, RetryableGpuError),
        (pynvml.NVML_ERROR_IN_USE, RetryableGpuError),
        (pynvml.NVML_ERROR_NOT_READY, RetryableGpuError),
        (pynvml.NVML_ERROR_UNKNOWN, RetryableGpuError),
        (pynvml.NVML_ERROR_RESET_REQUIRED, GpuError),
        (pynvml.NVML_ERROR_CORRUPTED_INFOROM, GpuError),
    ],
)
def test_each_nvml_error_class_maps_to_its_gpu_error_keeping_the_code(code: int, expected: type[GpuError]) -> None:
    original = pynvml.NVMLError(code)  # pynvml's own dynamically created subclass, e.g. NVMLError_NoPermission
    error = from_nvml_error(original, doing="set the power limit of GPU-x to 500000 mW")
    assert type(error) is expected
    assert error.code == code
    assert error.__cause__ is original
    assert str(error).startswith("set the power limit of GPU-x to 500000 mW failed: NVML error")


def test_pynvml_named_subclasses_map_like_their_codes() -> None:
    assert isinstance(from_nvml_error(pynvml.NVMLError_NoPermission()), GpuNoPermission)
    assert isinstance(from_nvml_error(pynvml.NVMLError_GpuIsLost()), GpuLost)
    assert isinstance(from_nvml_error(pynvml.NVMLError_LibraryNotFound()), NvmlUnavailable)


def test_transient_errors_are_retryable_action_errors_and_the_others_are_not() -> None:
    assert isinstance(from_nvml_error(pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)), RetryableActionError)
    for code in (pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_INVALID_ARGUMENT):
        error = from_nvml_error(pynvml.NVMLError(code))
        assert isinstance(error, ActionError)
        assert not isinstance(error, RetryableActionError)


def test_messages_say_what_to_do_next() -> None:
    assert "root" in str(from_nvml_error(pynvml.NVMLError_NoPermission()))
    assert "CAP_SYS_ADMIN" in str(from_nvml_error(pynvml.NVMLError_NoPermission()))
    missing = str(from_nvml_error(pynvml.NVMLError_LibraryNotFound(), doing="initialise NVML"))
    assert "NVML Shared Library Not Found" in missing
    assert "driver" in missing
    assert "simulated GPU backend explicitly" in missing
    assert "reboot" in str(from_nvml_error(pynvml.NVMLError_LibRmVersionMismatch()))
    assert "reset" in str(from_nvml_error(pynvml.NVMLError_GpuIsLost()))


def test_a_bare_raise_of_a_mapped_error_still_names_the_nvml_error_as_its_cause() -> None:
    with pytest.raises(GpuLost) as caught:
        try:
            raise pynvml.NVMLError_GpuIsLost()
        except pynvml.NVMLError as exc:
            raise from_nvml_error(exc)  # noqa: B904 - the point: the mapper chains it by itself
    assert isinstance(caught.value.__cause__, pynvml.NVMLError_GpuIsLost)


def test_an_error_without_a_code_becomes_a_plain_gpu_error() -> None:
    error = from_nvml_error(RuntimeError("something odd"))
    assert type(error) is GpuError
    assert error.code is None
    assert "something odd" in str(error)


def test_an_unknown_code_becomes_a_plain_gpu_error_with_that_code() -> None:
    error = from_nvml_error(pynvml.NVMLError(4242))
    assert type(error) is GpuError
    assert error.code == 4242
    assert "4242" in str(error)


def test_classes_raised_directly_carry_their_default_code() -> None:
    assert GpuNoPermission().code == pynvml.NVML_ERROR_NO_PERMISSION
    assert GpuLost("gone").code == pynvml.NVML_ERROR_GPU_IS_LOST
    assert GpuInvalidArgument(code=None).code == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert NvmlUnavailable().code is None
    assert "root" in str(GpuNoPermission())


def test_error_for_code_adds_the_detail_after_nvml_wording() -> None:
    error = error_for_code(2, doing="set the power limit of GPU-x to 1 mW", detail="outside 200000..700000 mW")
    assert isinstance(error, GpuInvalidArgument)
    assert "NVML error 2 (Invalid Argument): outside 200000..700000 mW" in str(error)


def test_selection_errors_are_params_errors_not_action_errors() -> None:
    assert issubclass(GpuSelectionError, ParamsError)
    assert not issubclass(GpuSelectionError, ActionError)


def test_gpu_errors_survive_pickling_with_their_code() -> None:
    error = pickle.loads(pickle.dumps(GpuNotFound("gone", code=pynvml.NVML_ERROR_GPU_NOT_FOUND)))  # noqa: S301
    assert isinstance(error, GpuNotFound)
    assert str(error) == "gone"
    assert error.code == pynvml.NVML_ERROR_GPU_NOT_FOUND
