"""`remediate serve --ui/--no-ui` sets the `ui` setting (the pages are on by default)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from click.testing import Result

Cli = Callable[..., Result]


@pytest.mark.parametrize(("flags", "expected"), [((), True), (("--no-ui",), False), (("--ui",), True)])
def test_serve_passes_the_ui_flag_to_the_settings(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], expected: bool
) -> None:
    import remediate.serving

    seen: list[Any] = []
    monkeypatch.setattr(remediate.serving, "run_server", seen.append)
    result = cli("serve", "--insecure-no-auth", *flags)
    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert settings.ui.enabled is expected


def test_the_environment_turns_the_pages_off(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import remediate.serving

    seen: list[Any] = []
    monkeypatch.setattr(remediate.serving, "run_server", seen.append)
    monkeypatch.setenv("REMEDIATE_UI", "false")
    result = cli("serve", "--insecure-no-auth")
    assert result.exit_code == 0, result.output
    assert seen[0].ui.enabled is False
