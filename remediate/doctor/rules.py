"""The rules of Prometheus rule files (alertmanager/rules/*.rules.yml as shipped): each one's name, file,
expression and the labels its alerts carry, which is what the series and routing checks read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from remediate.errors import ConfigError


@dataclass(frozen=True)
class Rule:
    name: str
    """The alert's alertname, or a recording rule's series name."""
    file: str
    """The file's name (not its path: the output names `gpu.rules.yml`)."""
    expr: str
    labels: tuple[tuple[str, str], ...] = ()
    """The rule's own `labels:` (severity, ...), which AlertManager routes on with alertname."""
    alert: bool = True
    """An alerting rule; False: a recording rule."""


def rule_files(where: Path) -> list[Path]:
    """`where` itself, or the `*.rules.yml` / `*.rules.yaml` of a directory (their promtool tests left out)."""
    if where.is_dir():
        return sorted(p for p in where.iterdir() if p.name.endswith((".rules.yml", ".rules.yaml")))
    return [where]


def read_rules(paths: Iterable[Path]) -> list[Rule]:
    found: list[Rule] = []
    for path in paths:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read rule file {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"rule file {path} is not valid YAML: {exc}") from exc
        for group in data.get("groups") or []:
            for raw in group.get("rules") or []:
                name = raw.get("alert") or raw.get("record")
                if not name or "expr" not in raw:
                    raise ConfigError(f"rule file {path}: a rule without alert/record or expr: {raw!r}")
                labels = tuple(sorted((str(k), str(v)) for k, v in (raw.get("labels") or {}).items()))
                found.append(Rule(str(name), path.name, str(raw["expr"]), labels, alert="alert" in raw))
    return found
