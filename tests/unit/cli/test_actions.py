"""`remediate actions`: the table of actions and where each runs."""

from __future__ import annotations


def test_remediate_actions_lists_where_each_action_runs() -> None:
    from click.testing import CliRunner

    from remediate.cli import main

    result = CliRunner().invoke(main, ["actions"])

    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split()[1] for line in result.output.splitlines()[1:]}
    assert lines["gpu.set_power_limit"] == "node"
    assert lines["log"] == "cluster"
