"""GPU references from alert labels: every accepted form parses and resolves; anything else is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.gpu import (
    GpuInfo,
    GpuLost,
    GpuNotFound,
    GpuRef,
    GpuSelectionError,
    SimulatedBackend,
    normalize_pci_bus_id,
    parse_gpu_ref,
    resolve,
    select,
)

UUID = "GPU-5f6ac2e3-2f4b-13d2-80f4-5e4d9c3e8d2a"


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("0", "index", "0"),
        ("3", "index", "3"),
        ("15", "index", "15"),
        (UUID, "uuid", UUID),
        (UUID.upper(), "uuid", UUID),
        ("gpu-5f6ac2e3-2f4b-13d2-80f4-5e4d9c3e8d2a", "uuid", UUID),
        ("00000000:3B:00.0", "pci", "00000000:3B:00.0"),
        ("0000:3b:00.0", "pci", "00000000:3B:00.0"),
        ("3b:00.0", "pci", "00000000:3B:00.0"),
        ("3B:00", "pci", "00000000:3B:00.0"),
        ("0000:3b:00", "pci", "00000000:3B:00.0"),
        ("1:3b:1f.7", "pci", "00000001:3B:1F.7"),
        ("MIG-a1b2c3d4-0000-1111-2222-333344445555", "mig", "MIG-a1b2c3d4-0000-1111-2222-333344445555"),
        ("mig-A1B2C3D4-0000-1111-2222-333344445555", "mig", "MIG-a1b2c3d4-0000-1111-2222-333344445555"),
        (f"MIG-{UUID.upper()}/1/0", "mig", f"MIG-{UUID}/1/0"),
        ("all", "all", "all"),
    ],
)
def test_every_accepted_form_parses_to_its_normal_form(text: str, kind: str, value: str) -> None:
    assert parse_gpu_ref(text) == GpuRef(kind, value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "3 ",
        " 3",
        "3\n",
        "-1",
        "+1",
        "03",
        "1.0",
        "0x3",
        "\u0661",  # an Arabic-Indic digit: int() would take it, a label must not
        "99999",
        "../etc",
        "/dev/nvidia0",
        "nvidia3",
        "1; rm -rf /",
        "$(reboot)",
        "GPU-zz",
        "GPU-",
        "GPU-5f6ac2e3-2f4b-13d2-80f4-5e4d9c3e8d2",  # one digit short
        "GPU-5f6ac2e3-2f4b-13d2-80f4-5e4d9c3e8d2aa",
        "GPU-5f6ac2e3_2f4b_13d2_80f4_5e4d9c3e8d2a",
        f"{UUID},GPU-00000000-0000-0000-0000-000000000000",
        "MIG-",
        "MIG-GPU-zz/1/0",
        f"MIG-{UUID}/1",
        f"MIG-{UUID}/01/0",
        "ALL",
        "All",
        "*",
        "3b:20.0",  # device numbers stop at 0x1f
        "3b:00.8",  # functions stop at 7
        "123456789:3b:00.0",  # domains have at most 8 hex digits
        "3b:00.0.0",
        "3b::00.0",
        "g3:00.0",
    ],
)
def test_values_that_fit_no_form_are_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(GpuSelectionError, match="expected a GPU index") as caught:
        parse_gpu_ref(text)
    assert "PCI bus id" in str(caught.value)


def test_a_non_string_is_refused() -> None:
    with pytest.raises(GpuSelectionError):
        parse_gpu_ref(3)  # type: ignore[arg-type]


def test_a_huge_label_is_quoted_only_in_part() -> None:
    with pytest.raises(GpuSelectionError) as caught:
        parse_gpu_ref("x" * 100_000)
    assert len(str(caught.value)) < 600


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3b:00.0", "00000000:3B:00.0"),
        ("0000:3b:00.0", "00000000:3B:00.0"),
        ("00000000:3B:00.0", "00000000:3B:00.0"),
        ("3B:00", "00000000:3B:00.0"),
        ("0:0", "00000000:00:00.0"),
        ("ffffffff:ff:1f.7", "FFFFFFFF:FF:1F.7"),
    ],
)
def test_pci_bus_ids_normalise_to_nvml_form(text: str, expected: str) -> None:
    assert normalize_pci_bus_id(text) == expected


@pytest.mark.parametrize("text", ["", "3b", "3b:00.0 ", "zz:00.0", "3b:00:00:00", "3b:00.0\n"])
def test_what_is_not_a_pci_bus_id_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="not a PCI bus id"):
        normalize_pci_bus_id(text)


# --- resolving against the simulator


@pytest.mark.parametrize(
    "reference",
    [
        "3",
        "{uuid}",
        "{upper_uuid}",
        "{pci}",
        "{short_pci}",
        "{legacy_pci}",
    ],
)
def test_index_uuid_and_pci_resolve_to_that_one_gpu(sim: SimulatedBackend, gpu3: GpuInfo, reference: str) -> None:
    text = reference.format(
        uuid=gpu3.uuid,
        upper_uuid=gpu3.uuid.upper(),
        pci=gpu3.pci_bus_id,
        short_pci=gpu3.pci_bus_id[9:].lower(),  # "5d:00.0"
        legacy_pci=gpu3.pci_bus_id[4:],  # "0000:5D:00.0"
    )
    assert select(text, sim) == [gpu3]


def test_all_resolves_to_every_gpu(sim: SimulatedBackend) -> None:
    assert [g.index for g in resolve(parse_gpu_ref("all"), sim)] == list(range(8))


def test_the_new_mig_form_resolves_to_its_parent_through_the_backend(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    mig = "MIG-a1b2c3d4-0000-1111-2222-333344445555"
    sim.update_device(gpu3.uuid, mig_uuids=[mig])
    assert select(mig, sim) == [sim.device(gpu3.uuid)]


def test_the_old_mig_form_names_its_parent_itself(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    assert select(f"MIG-{gpu3.uuid}/3/0", sim) == [gpu3]


def test_a_mig_device_that_is_not_here_is_not_found(sim: SimulatedBackend) -> None:
    with pytest.raises(GpuNotFound, match="MIG device MIG-a1b2c3d4-0000-1111-2222-333344445555 is not on this node"):
        select("MIG-a1b2c3d4-0000-1111-2222-333344445555", sim)
    with pytest.raises(GpuNotFound, match="which is not on this node"):
        select(f"MIG-{UUID}/1/0", sim)


@pytest.mark.parametrize("text", ["99", UUID, "00000000:01:00.0", "01:00"])
def test_a_gpu_that_is_not_on_this_node_is_not_found_and_the_message_lists_what_is(
    sim: SimulatedBackend, gpu3: GpuInfo, text: str
) -> None:
    with pytest.raises(GpuNotFound) as caught:
        select(text, sim)
    assert gpu3.uuid in str(caught.value)
    assert gpu3.pci_bus_id in str(caught.value)


def test_a_node_without_gpus_has_nothing_for_all(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    path.write_text("devices: []\n")
    with pytest.raises(GpuNotFound, match="no GPUs"):
        select("all", SimulatedBackend(path))


def test_a_lost_gpu_surfaces_when_resolving_it(sim: SimulatedBackend, gpu3: GpuInfo) -> None:
    sim.update_device(gpu3.uuid, lost=True)
    with pytest.raises(GpuLost):
        select(gpu3.uuid, sim)
