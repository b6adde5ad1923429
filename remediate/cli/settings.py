"""`remediate settings`: the reference of every setting, built from the declarations themselves.

Each setting's key, default and converter come from its `setting(...)` in remediate.config.settings, what it does from
the docstring under it, its `REMEDIATE_*` variable from its key, its flags from the options of `remediate serve`
and `remediate agent`. docs/settings.md embeds `markdown()` between generated-section markers
(scripts/sync-generated writes it, a test keeps the two equal), so the documented settings are always all of them.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from remediate.cli._common import print_json
from remediate.cli._group import main

BEGIN = "<!-- BEGIN GENERATED: remediate settings --markdown -->"
END = "<!-- END GENERATED -->"
PROGRAMS = ("serve", "agent")
"""The commands whose flags are listed: the server and the node agent (the others take --config and the
environment; `remediate COMMAND --help` lists their flags)."""


@dataclass(frozen=True)
class SettingDoc:
    """One setting as a user writes it: `key` in the file, `env` in the environment, `flags` on a command line."""

    key: str
    env: str
    flags: tuple[str, ...]
    default: str
    doc: str
    section: str


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls` (fields without one are left out)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for each, after in itertools.pairwise(body):
        named = isinstance(each, ast.AnnAssign) and isinstance(each.target, ast.Name)
        if named and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            docs[each.target.id] = inspect.cleandoc(str(after.value.value))
    return docs


def _flags() -> dict[str, list[str]]:
    """Setting key -> `--flag (command)` of the PROGRAMS' options that set it."""
    from remediate.config.settings import FLAT

    found: dict[str, dict[str, list[str]]] = {}
    for program in PROGRAMS:
        for param in main.commands[program].params:
            if isinstance(param, click.Option) and param.name in FLAT:
                shown = "/".join([*param.opts, *param.secondary_opts])
                found.setdefault(param.name, {}).setdefault(shown, []).append(program)
    return {
        key: [f"`{flag}` ({', '.join(programs)})" for flag, programs in flags.items()] for key, flags in found.items()
    }


def _default(value: Any, convert: Any) -> str:
    from remediate.config import values as v
    from remediate.config.durations import format_duration

    if value is None or value == ():
        return "none"
    if convert in (v.to_seconds, v.to_lease, v.to_retention, v.to_worker_timeout) and value >= 1:
        return f"`{format_duration(value)}`"
    if isinstance(value, tuple):
        return f"`{', '.join(map(str, value))}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`" if isinstance(value, str | Path) else f"`{value:,}`" if isinstance(value, int) else f"`{value}`"


def reference() -> list[SettingDoc]:
    """Every setting, in the order of its declaration."""
    from remediate.config.settings import ENV_PREFIX, Settings, flat_name, setting_fields

    flags, docs = _flags(), {}
    entries = []
    for cls, each in setting_fields(Settings):
        docs.setdefault(cls, field_docs(cls))
        key = flat_name(cls, each)
        default = each.default if each.default is not dataclasses.MISSING else None
        entries.append(
            SettingDoc(
                key=key,
                env=f"{ENV_PREFIX}{key.upper()}",
                flags=tuple(flags.get(key, ())),
                default=_default(default, each.metadata["convert"]),
                doc=docs[cls].get(each.name, ""),
                section=inspect.cleandoc(cls.__doc__ or cls.__name__).rstrip("."),
            )
        )
    return entries


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown(entries: list[SettingDoc] | None = None) -> str:
    """The settings reference of docs/settings.md: one table per section, one row per setting."""
    entries = reference() if entries is None else entries
    lines: list[str] = []
    for section in dict.fromkeys(entry.section for entry in entries):
        lines += ["", f"### {_cell(section)}", "", "| setting | environment | flag | default | what it does |"]
        lines.append("|---|---|---|---|---|")
        for e in (entry for entry in entries if entry.section == section):
            flags = ", ".join(e.flags)
            lines.append(f"| `{e.key}` | `{e.env}` | {flags} | {_cell(e.default)} | {_cell(e.doc)} |")
    return "\n".join(lines[1:]) + "\n"


@main.command("settings")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the reference of docs/settings.md.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def settings(as_markdown: bool, as_json: bool) -> None:
    """List every setting: its key, environment variable, flags, default and what it does."""
    if as_markdown:
        click.echo(markdown(), nl=False)
        return
    entries = reference()
    if not print_json([dataclasses.asdict(entry) for entry in entries], as_json):
        for entry in entries:
            click.echo(f"{entry.key}  {entry.env}  [{entry.default.strip('`')}]")
