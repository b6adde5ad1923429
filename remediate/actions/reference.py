"""The reference of the actions a playbook step can call, built from the actions themselves.

`remediate actions` prints it; docs/playbooks.md embeds `markdown(...)` between generated-section
markers (a test keeps the two equal), so the documented params are always the schemas' own.
"""

from __future__ import annotations

from typing import Any

from remediate.actions.base import Action, ActionRegistry

BEGIN = "<!-- BEGIN GENERATED: remediate actions --markdown -->"
END = "<!-- END GENERATED -->"


def describe(action: Action) -> dict[str, Any]:
    return {
        "name": action.name,
        "where": str(action.where),
        "idempotent": action.idempotent,
        "description": action.description,
        "params": [
            {
                "name": name,
                "type": spec.type_name or spec.type.__name__,
                "required": spec.required,
                "default": spec.default,
                "choices": list(spec.choices),
                "static": spec.static,
                "secret": spec.secret,
                "doc": spec.doc,
            }
            for name, spec in action.schema.fields.items()
        ],
    }


def reference(registry: ActionRegistry) -> list[dict[str, Any]]:
    return [describe(registry.get(name)) for name in registry.names()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(registry: ActionRegistry) -> str:
    """One section per action: where it runs, whether it is idempotent, and a table of its params."""
    lines: list[str] = []
    for entry in reference(registry):
        lines.append(f"### `{entry['name']}`")
        lines.append("")
        facts = [f"runs on: **{entry['where']}**", "idempotent" if entry["idempotent"] else "not idempotent"]
        lines.append(f"{_cell(entry['description']) or '(no description)'} — {', '.join(facts)}.")
        lines.append("")
        if not entry["params"]:
            lines.append("No params.")
            lines.append("")
            continue
        lines.append("| param | type | required | default | what |")
        lines.append("|---|---|---|---|---|")
        for param in entry["params"]:
            what = param["doc"]
            if param["choices"]:
                what += f" (one of: {', '.join(f'`{c}`' for c in param['choices'])})"
            if param["static"]:
                what += " **Static**: written in the playbook, never templated."
            if param["secret"]:
                what += (
                    " **Secret**: an absolute file path (e.g. a mounted Secret); only the path is stored and shown,"
                    " the file is read when the step runs."
                )
            default = "" if param["default"] is None else f"`{param['default']}`"
            lines.append(
                f"| `{param['name']}` | {param['type']} | {'yes' if param['required'] else ''} | {default} "
                f"| {_cell(what.strip())} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
