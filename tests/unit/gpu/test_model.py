"""GpuInfo travels as JSON (audit history, node agent) with watts alongside milliwatts."""

from __future__ import annotations

import json

from remediate.gpu import GpuInfo, GpuProcess


def make_info(**changes: object) -> GpuInfo:
    fields: dict[str, object] = {
        "index": 3,
        "uuid": "GPU-11111111-2222-3333-4444-555555555555",
        "pci_bus_id": "00000000:5D:00.0",
        "name": "NVIDIA H100 80GB HBM3",
        "power_limit_mw": 560_000,
        "default_limit_mw": 700_000,
        "min_limit_mw": 200_000,
        "max_limit_mw": 700_000,
        "enforced_limit_mw": 560_000,
        "power_usage_mw": 312_345,
        "temperature_c": 83,
        "processes": (GpuProcess(pid=4242, used_memory_bytes=None, name="python"),),
        "mig_uuids": ("MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",),
    }
    fields.update(changes)
    return GpuInfo(**fields)  # type: ignore[arg-type]


def test_to_dict_is_json_and_gives_watts_for_people() -> None:
    data = json.loads(json.dumps(make_info().to_dict()))
    assert data["power_limit_mw"] == 560_000
    assert data["power_limit_w"] == 560.0
    assert data["default_limit_w"] == 700.0
    assert data["min_limit_w"] == 200.0
    assert data["max_limit_w"] == 700.0
    assert data["enforced_limit_w"] == 560.0
    assert data["power_usage_w"] == 312.345
    assert data["processes"] == [{"pid": 4242, "used_memory_bytes": None, "name": "python"}]
    assert data["mig_uuids"] == ["MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"]


def test_unknown_readings_stay_none_in_both_units() -> None:
    data = make_info(power_usage_mw=None, temperature_c=None).to_dict()
    assert (data["power_usage_mw"], data["power_usage_w"], data["temperature_c"]) == (None, None, None)


def test_from_dict_reverses_to_dict() -> None:
    info = make_info()
    assert GpuInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info
    bare = make_info(processes=(), mig_uuids=(), power_usage_mw=None, temperature_c=None)
    assert GpuInfo.from_dict(bare.to_dict()) == bare


def test_gpu_info_is_immutable_and_hashable() -> None:
    info = make_info()
    assert hash(info) == hash(make_info())
