"""docs/playbooks.md documents every action with the params its schema really has (scripts/sync-generated)."""

from __future__ import annotations

from pathlib import Path

from remediate.actions import default_registry
from remediate.actions.reference import BEGIN, END, markdown, reference

ROOT = Path(__file__).resolve().parents[1]


def test_the_actions_reference_in_the_playbook_guide_is_generated_from_the_schemas() -> None:
    text = (ROOT / "docs" / "playbooks.md").read_text(encoding="utf-8")
    assert BEGIN in text and END in text
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert section.strip() == markdown(default_registry()).strip(), "run scripts/sync-generated"


def test_the_reference_names_every_action_where_it_runs_and_each_param() -> None:
    registry = default_registry()
    text = markdown(registry)
    for entry in reference(registry):
        assert f"### `{entry['name']}`" in text
        assert f"runs on: **{entry['where']}**" in text
        for param in entry["params"]:
            assert f"| `{param['name']}` |" in text
    gpu = next(e for e in reference(registry) if e["name"] == "gpu.set_power_limit")
    assert gpu["where"] == "node"
    assert next(p for p in gpu["params"] if p["name"] == "gpu")["required"] is True
