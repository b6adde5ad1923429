"""`remediate serve --ui/--no-ui` sets the `ui` setting (the pages are on by default)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cli import run_cli as cli


@pytest.mark.parametrize(
    ("environment", "flags", "expected"),
    [({}, (), True), ({}, ("--no-ui",), False), ({}, ("--ui",), True), ({"REMEDIATE_UI": "false"}, (), False)],
)
def test_serve_passes_the_ui_flag_or_the_environment_to_the_settings(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], flags: tuple[str, ...], expected: bool
) -> None:
    import remediate.serve.launcher

    seen: list[Any] = []
    monkeypatch.setattr(remediate.serve.launcher, "run_server", seen.append)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    result = cli("serve", "--insecure-no-auth", *flags)
    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert settings.ui.enabled is expected
