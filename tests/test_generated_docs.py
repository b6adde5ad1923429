"""docs/playbooks.md documents every action with the params its schema really has, docs/settings.md every setting
with its variable, flags, default and docstring (scripts/sync-generated writes both)."""

from __future__ import annotations

from pathlib import Path

from remediate.actions import default_registry
from remediate.actions.reference import BEGIN, END, markdown, reference
from remediate.cli import settings as settings_ref
from remediate.config.settings import FLAT

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


def test_the_settings_reference_is_generated_from_the_declarations() -> None:
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert settings_ref.BEGIN in text and settings_ref.END in text
    section = text.split(settings_ref.BEGIN, 1)[1].split(settings_ref.END, 1)[0]
    assert section.strip() == settings_ref.markdown().strip(), "run scripts/sync-generated"


def test_the_settings_reference_has_every_setting_with_its_variable_default_and_what_it_does() -> None:
    """Every key the loader accepts has a row, and every row says what the setting does (a docstring under its
    declaration): a setting added without one fails here, not silently in the docs."""
    entries = settings_ref.reference()
    assert sorted(entry.key for entry in entries) == sorted(FLAT)
    text = settings_ref.markdown(entries)
    for entry in entries:
        assert entry.doc, f"{entry.key}: no docstring under its setting(...) in remediate/config/settings.py"
        assert f"| `{entry.key}` | `REMEDIATE_{entry.key.upper()}` |" in text
    by_key = {entry.key: entry for entry in entries}
    assert by_key["notify_timeout"].default == "`10s`"
    assert by_key["agent_threads"].flags == ("`--threads` (agent)",)
    assert by_key["ui"].flags == ("`--ui/--no-ui` (serve)",)
    assert by_key["config"].flags == ("`--config` (serve, agent)",)
    assert by_key["database_url"].default == "`sqlite:///remediate.db`"
