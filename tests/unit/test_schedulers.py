"""The `schedulers` setting: a server loads the node steps of the schedulers it runs and names the others left out
(remediate.config.schedulers, remediate.playbooks.loading), so one shipped ladder serves Kubernetes, Slurm and both."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from remediate.actions import default_registry
from remediate.cli import main
from remediate.config.schedulers import Scheduler, to_schedulers
from remediate.config.settings import Settings, check_schedulers, load_settings
from remediate.errors import ConfigError, PlaybookError
from remediate.playbooks.loading import parse_playbook
from remediate.serve.startup import start_up_block

LADDER = {
    "name": "quarantine",
    "match": {"alertname": "GPUXidCritical"},
    "escalate": [
        {
            "name": "drain",
            "holds_for": "1h",
            "steps": [
                {"name": "cordon", "action": "k8s.cordon"},
                {"name": "slurm-drain", "action": "slurm.drain", "with": {"note": "xid"}},
                {"name": "tell", "action": "log", "with": {"message": "done"}},
            ],
            "on_resolved": [
                {"name": "uncordon", "action": "k8s.uncordon"},
                {"name": "resume", "action": "slurm.resume"},
            ],
        },
        {"name": "keep-out", "holds_for": "1h", "steps": [{"name": "drain", "action": "slurm.drain"}]},
    ],
}


def loaded(schedulers: str) -> tuple[list[str], list[str], list[str]]:
    """(rung 1's steps, its resolve steps, the left-out steps' places) as a server with `schedulers` loads LADDER."""
    settings = load_settings(env={}, overrides={"schedulers": schedulers, "slurm_conf": "/etc/slurm/slurm.conf"})
    playbook = parse_playbook(LADDER, default_registry(settings))
    rung = playbook.rungs[0]
    return [s.name for s in rung.steps], [s.name for s in rung.on_resolved], [s.where for s in playbook.left_out]


def test_the_setting_takes_a_list_a_comma_separated_string_or_none() -> None:
    assert to_schedulers("slurm") == (Scheduler.SLURM,)
    assert to_schedulers(" Kubernetes, slurm ,kubernetes") == (Scheduler.KUBERNETES, Scheduler.SLURM)
    assert to_schedulers(["slurm", "kubernetes"]) == (Scheduler.SLURM, Scheduler.KUBERNETES)
    assert to_schedulers("none") == ()
    assert to_schedulers([]) == ()
    assert Settings().engine.schedulers == (Scheduler.KUBERNETES,)  # as every release before the Slurm steps
    with pytest.raises(ConfigError, match=r"schedulers.*among.*got pbs"):
        load_settings(env={"REMEDIATE_SCHEDULERS": "slurm,pbs"})


def test_a_slurm_site_loads_the_slurm_steps_and_names_the_kubernetes_ones_left_out() -> None:
    steps, undo, left_out = loaded("slurm")
    assert steps == ["slurm-drain", "tell"]
    assert undo == ["resume"]
    assert left_out == ["escalate[0].steps[0]", "escalate[0].on_resolved[0]"]


def test_a_kubernetes_site_loads_the_kubernetes_steps_and_a_rung_of_slurm_steps_only_is_empty_and_warned() -> None:
    steps, undo, left_out = loaded("kubernetes")
    assert (steps, undo) == (["cordon", "tell"], ["uncordon"])
    assert left_out == ["escalate[0].steps[1]", "escalate[0].on_resolved[1]", "escalate[1].steps[0]"]
    playbook = parse_playbook(LADDER, default_registry(Settings()))
    assert "escalate[1].steps: every step acts on a scheduler this server does not run" in " ".join(playbook.warnings())


def test_slurm_on_kubernetes_loads_both_and_a_site_with_none_loads_neither() -> None:
    assert loaded("kubernetes,slurm")[:2] == (["cordon", "slurm-drain", "tell"], ["uncordon", "resume"])
    assert loaded("none")[:2] == (["tell"], [])


def test_a_left_out_step_is_still_checked_so_a_typo_fails_on_every_site() -> None:
    bad = yaml.safe_load(yaml.safe_dump(LADDER))
    bad["escalate"][0]["steps"][1]["with"] = {"nte": "xid"}
    with pytest.raises(PlaybookError, match=r"escalate\[0\]\.steps\[1\]\.with.*nte"):
        parse_playbook(bad, default_registry(Settings()))  # kubernetes: the slurm step is left out, still checked


def test_a_slurm_site_without_slurm_conf_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="schedulers names slurm but slurm_conf is not set"):
        check_schedulers(load_settings(env={"REMEDIATE_SCHEDULERS": "slurm"}))
    check_schedulers(load_settings(env={"REMEDIATE_SCHEDULERS": "slurm", "REMEDIATE_SLURM_CONF": "/etc/slurm.conf"}))


def test_the_start_up_block_says_which_scheduler_steps_run() -> None:
    settings = load_settings(env={"REMEDIATE_SCHEDULERS": "slurm", "REMEDIATE_SLURM_CONF": "/etc/slurm/slurm.conf",
                                  "REMEDIATE_SLURM_PARTITIONS": "train"})  # fmt: skip
    lines = start_up_block(settings, ["quarantine"], uses_agents=False)
    assert "cluster (k8s.* steps): left out of the playbooks (schedulers: slurm)" in lines
    assert "Slurm (slurm.* steps): /etc/slurm/slurm.conf; nodes of train" in lines
    assert not any(line.startswith("Slurm") for line in start_up_block(Settings(), [], uses_agents=False))


def test_playbooks_validate_lists_what_a_slurm_site_leaves_out_of_the_shipped_ladders(tmp_path: Path) -> None:
    (tmp_path / "quarantine.yaml").write_text(yaml.safe_dump(LADDER))
    result = CliRunner().invoke(main, ["playbooks", "validate", str(tmp_path), "--schedulers", "slurm"])
    assert result.exit_code == 0, result.output
    assert "schedulers: slurm" in result.output
    assert "  left out escalate[0].steps[0] (cordon): k8s.cordon acts on kubernetes; this server's schedulers " \
        "setting is slurm" in result.output  # fmt: skip
    result = CliRunner().invoke(main, ["playbooks", "validate", str(tmp_path), "--schedulers", "pbs"])
    assert result.exit_code != 0
    assert "pbs" in result.output


RESTART = {
    "name": "fail-slow",
    "match": {"alertname": "TrainingStragglerRank"},
    "steps": [
        {"name": "drain", "action": "slurm.drain"},
        {"name": "checkpoint", "action": "training.command", "jobs": "slurm", "with": {"command": "checkpoint"}},
        {"name": "requeue", "action": "slurm.requeue"},
        {"name": "restart", "action": "training.command", "jobs": "launcher", "with": {"command": "restart"}},
    ],
}


@pytest.mark.parametrize(
    ("schedulers", "steps"),
    [
        ("kubernetes", ["restart"]),
        ("none", ["restart"]),  # torchrun --max-restarts on bare hosts: the launcher's path
        ("slurm", ["drain", "checkpoint", "requeue"]),
        ("kubernetes,slurm", ["drain", "checkpoint", "requeue"]),  # Slurm on Kubernetes: the jobs are Slurm's
    ],
)
def test_a_jobs_key_puts_a_step_on_one_restart_path_slurm_where_the_site_runs_slurm(
    schedulers: str, steps: list[str]
) -> None:
    settings = load_settings(env={}, overrides={"schedulers": schedulers, "slurm_conf": "/etc/slurm/slurm.conf"})
    playbook = parse_playbook(RESTART, default_registry(settings))
    assert [s.name for s in playbook.steps] == steps
    left_out = {s.name: s.why for s in playbook.left_out}
    if "restart" in left_out:
        assert left_out["restart"] == (
            f"the restart path of jobs under launcher; with schedulers {schedulers.replace(',', ', ')} jobs restart "
            "under slurm"
        )


def test_a_jobs_key_names_one_of_the_two_paths() -> None:
    bad = {**RESTART, "steps": [{**RESTART["steps"][1], "jobs": "pbs"}]}
    with pytest.raises(PlaybookError, match=r"steps\[0\]\.jobs.*must be one of slurm, launcher"):
        parse_playbook(bad, default_registry(Settings()))


def test_dry_run_names_the_steps_this_site_leaves_out(tmp_path: Path) -> None:
    (tmp_path / "quarantine.yaml").write_text(yaml.safe_dump(LADDER))
    args = ["dry-run", "--playbooks", str(tmp_path), "--database-url", f"sqlite:///{tmp_path / 'none.db'}",
            "--alertname", "GPUXidCritical", "--label", "Hostname=gpu-01"]  # fmt: skip
    result = CliRunner().invoke(main, args, env={"REMEDIATE_SCHEDULERS": "none"})
    assert "    left out escalate[0].steps[0] (cordon): k8s.cordon acts on kubernetes; this server's schedulers " \
        "setting is none" in result.output, result.output  # fmt: skip
    assert "step 0 tell [log @ cluster]" in result.output, result.output  # the one step this site runs
