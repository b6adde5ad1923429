"""Which dcgm-exporter generation a DCGM series name suggests.

dcgm-exporter 4.9 (DCGM 4.7) renamed the default fields DCGM 4.7 deprecates, most with a unit in the name
(`DCGM_FI_DEV_GPU_TEMP` -> `DCGM_FI_DEV_GPU_TEMP_CELSIUS`, `DCGM_FI_DEV_FB_USED` -> `DCGM_FI_DEV_FB_USED_BYTES`).
The pairs below are those DCGM's field list gives in full (the project's reference table of legacy and canonical
names); a name not in it is judged by its unit suffix, never mapped to a guessed counterpart.
"""

from __future__ import annotations

LEGACY_TO_CANONICAL: dict[str, str] = {
    "DCGM_FI_DEV_SM_CLOCK": "DCGM_FI_DEV_SM_CLOCK_HERTZ",
    "DCGM_FI_DEV_MEM_CLOCK": "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
    "DCGM_FI_DEV_GPU_TEMP": "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
    "DCGM_FI_DEV_MEMORY_TEMP": "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS",
    "DCGM_FI_DEV_POWER_USAGE": "DCGM_FI_DEV_BOARD_POWER_WATTS",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
    "DCGM_FI_DEV_GPU_UTIL": "DCGM_FI_DEV_GPU_UTIL_RATIO",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
    "DCGM_FI_DEV_FB_FREE": "DCGM_FI_DEV_FB_FREE_BYTES",
    "DCGM_FI_DEV_FB_USED": "DCGM_FI_DEV_FB_USED_BYTES",
    "DCGM_FI_DEV_FB_RESERVED": "DCGM_FI_DEV_FB_RESERVED_BYTES",
    "DCGM_FI_DEV_FB_TOTAL": "DCGM_FI_DEV_FB_CAPACITY_BYTES",
    "DCGM_FI_DEV_POWER_VIOLATION": "DCGM_FI_DEV_GPU_POWER_THROTTLE_SECONDS_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "DCGM_FI_DEV_PCIE_REPLAY_TOTAL",
    "DCGM_FI_DEV_XID_ERRORS": "DCGM_FI_DEV_XID_ERROR",
}
"""Legacy (exporter <= 4.8 default) name -> the DCGM 4.7+ name of the same field."""

LEGACY_ONLY = frozenset(
    {
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }
)
"""Legacy names DCGM 4.7 deprecates whose new name the reference gives only in part."""

CANONICAL_SUFFIXES = (
    "_CELSIUS",
    "_BYTES",
    "_HERTZ",
    "_RATIO",
    "_WATTS",
    "_JOULES_TOTAL",
    "_SECONDS_TOTAL",
    "_BYTES_PER_SECOND",
)
"""Units DCGM 4.7's names carry (clocks in Hz, memory in bytes, utilisation as a 0-1 ratio, time in seconds)."""

CANONICAL_NAMES = frozenset(LEGACY_TO_CANONICAL.values()) | {
    "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILED",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL",
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
}

LEGACY = "dcgm-exporter <= 4.8 (legacy field names)"
CANONICAL = "dcgm-exporter >= 4.9 (DCGM 4.7 field names)"
EXPORTER_OWN = "dcgm-exporter's own family (commented out in its default counters file)"
UNKNOWN = "dcgm-exporter (a name doctor does not know the generation of)"


def generation(name: str) -> str | None:
    """The dcgm-exporter generation `name` suggests; None for a series that is not dcgm-exporter's."""
    if name in LEGACY_TO_CANONICAL or name in LEGACY_ONLY:
        return LEGACY
    if name in CANONICAL_NAMES:
        return CANONICAL
    if name.startswith("DCGM_EXP_"):
        return EXPORTER_OWN
    if name.startswith("DCGM_FI_"):
        return CANONICAL if name.endswith(CANONICAL_SUFFIXES) else UNKNOWN
    return None


def describe(name: str) -> str:
    """`name` with the generation it suggests and, for a legacy name, what 4.9+ calls it."""
    found = generation(name)
    if found is None:
        return name
    if name in LEGACY_TO_CANONICAL:
        return f"{name} [{found}; 4.9+ exports {LEGACY_TO_CANONICAL[name]}]"
    return f"{name} [{found}]"
