"""The burnin_* settings (remediate.config.burnin): read from a file and the environment like every section,
checked when they load, and given to slurm.burnin and k8s.burnin as the defaults of the params a step does not
write (a step's own win); with no baseline table at all a burn-in succeeds as `skipped` without touching the
node, and k8s.burnin with a table but no image fails naming the setting."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from remediate.actions import default_registry
from remediate.actions.base import StepContext
from remediate.actions.burnin_common import NOT_CONFIGURED
from remediate.actions.k8s.burnin import KubeBurninAction
from remediate.actions.slurm.burnin import SlurmBurninAction
from remediate.config.burnin import BurninSettings, check_burnin
from remediate.config.settings import Settings, load_settings
from remediate.errors import ActionError, ConfigError
from remediate.intake.alertref import AlertRef
from tests.support.cli import assert_one_line_error
from tests.support.cli import run_cli as cli

TABLE = {"NVIDIA H100 80GB HBM3": 300, "cpu": 0.5}


def untouchable() -> Any:
    raise AssertionError("a skipped burn-in must not reach the cluster")


def ctx() -> StepContext:
    return StepContext(run_id=3, step_index=2, playbook="p", target="gpu-1", alert=AlertRef(labels={"node": "gpu-1"}))


def test_by_default_no_burnin_is_configured() -> None:
    burnin = Settings().burnin
    assert (burnin.baselines, burnin.tolerance, burnin.python, burnin.image, burnin.namespace) == (
        (), 0.8, None, None, None
    )  # fmt: skip
    assert not burnin.configured and burnin.defaults() == {"tolerance": 0.8}


def test_the_file_and_the_environment_set_the_burnin_section(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"burnin_baselines: {json.dumps(TABLE)}\nburnin_image: registry.example/burnin:1\n")
    env = {"REMEDIATE_BURNIN_TOLERANCE": "0.7", "REMEDIATE_BURNIN_PYTHON": "/opt/venv/bin/python",
           "REMEDIATE_BURNIN_NAMESPACE": "gpu-ops"}  # fmt: skip
    burnin = load_settings(config_file=config, env=env).burnin
    assert burnin.baselines == (("NVIDIA H100 80GB HBM3", 300.0), ("cpu", 0.5)) and burnin.configured
    assert (burnin.tolerance, burnin.python, burnin.image, burnin.namespace) == (
        0.7, "/opt/venv/bin/python", "registry.example/burnin:1", "gpu-ops"
    )  # fmt: skip
    # The environment's table is YAML/JSON text, as the other mapping settings'.
    again = load_settings(env={"REMEDIATE_BURNIN_BASELINES": json.dumps(TABLE)}).burnin
    assert again.defaults()["baselines"] == {"NVIDIA H100 80GB HBM3": 300.0, "cpu": 0.5}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("REMEDIATE_BURNIN_BASELINES", '{"cpu": 0}', "greater than 0"),
        ("REMEDIATE_BURNIN_BASELINES", "[1, 2]", "must be a mapping"),
        ("REMEDIATE_BURNIN_TOLERANCE", "1.5", "between 0.05 and 1"),
        ("REMEDIATE_BURNIN_PYTHON", "python3", "absolute path"),
        ("REMEDIATE_BURNIN_IMAGE", "registry/x; rm -rf /", "container image reference"),
        ("REMEDIATE_BURNIN_NAMESPACE", "Gpu_Ops", "namespace name"),
    ],
)
def test_a_bad_burnin_setting_is_refused_at_start_naming_it(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        load_settings(env={name: value})
    assert name[len("REMEDIATE_") :].lower() in str(refused.value)


def test_the_registry_gives_both_burnins_the_sites_settings() -> None:
    registry = default_registry(Settings.of(burnin_baselines=(("cpu", 0.5),), burnin_python="/usr/bin/python3"))
    for name in ("slurm.burnin", "k8s.burnin"):
        params = registry.get(name).validate({})
        assert (params["baselines"], params["python"], params["tolerance"]) == ({"cpu": 0.5}, "/usr/bin/python3", 0.8)


def test_a_steps_own_params_win_over_the_sites_and_its_table_replaces_the_sites_whole() -> None:
    site = BurninSettings(baselines=(("cpu", 0.5),), tolerance=0.6, python="/usr/bin/python3", image="site/img:1")
    action = KubeBurninAction(untouchable, site=site)
    params = action.validate({"baselines": {"NVIDIA H100 80GB HBM3": 300}, "tolerance": 0.9, "image": "own/img:2"})
    assert params["baselines"] == {"NVIDIA H100 80GB HBM3": 300} and params["tolerance"] == 0.9
    assert (params["image"], params["python"], "namespace" in params) == ("own/img:2", "/usr/bin/python3", False)
    # slurm.burnin has no image: the site's image is not one of its params.
    assert "image" not in SlurmBurninAction(untouchable, site=site).validate({})


@pytest.mark.parametrize("kind", [SlurmBurninAction, KubeBurninAction])
def test_with_no_baseline_anywhere_the_burnin_succeeds_as_skipped_without_touching_the_node(kind: Any) -> None:
    action = kind(untouchable)  # no site settings: none configured
    params = action.validate({})
    for outcome in (action.plan(params, ctx()), action.execute(params, ctx())):
        assert (outcome["outcome"], outcome["verdict"], outcome["reason"]) == ("skipped", "skipped", NOT_CONFIGURED)
    assert (
        NOT_CONFIGURED
        == 'no burn-in configured: set burnin_baselines (the chart\'s burnin.baselines; docs/slurm.md "Burn-in")'
    )


@pytest.mark.parametrize(
    ("site", "missing"),
    [
        (BurninSettings(baselines=(("cpu", 0.5),), python="/usr/bin/python3", namespace="gpu-ops"), "image"),
        (BurninSettings(baselines=(("cpu", 0.5),), image="site/img:1", namespace="gpu-ops"), "python"),
        (BurninSettings(baselines=(("cpu", 0.5),), image="site/img:1", python="/usr/bin/python3"), "namespace"),
    ],
)
def test_k8s_burnin_with_baselines_but_no_image_fails_naming_the_setting(site: BurninSettings, missing: str) -> None:
    action = KubeBurninAction(untouchable, site=site)
    with pytest.raises(ActionError, match=f"no {missing} for the burn-in: set the burnin_{missing} setting"):
        action.execute(action.validate({}), ctx())


def test_slurm_burnin_with_baselines_but_no_python_fails_naming_the_setting() -> None:
    action = SlurmBurninAction(untouchable, site=BurninSettings(baselines=(("cpu", 0.5),)))
    with pytest.raises(ActionError, match="no python for the burn-in: set the burnin_python setting"):
        action.execute(action.validate({}), ctx())


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"REMEDIATE_SCHEDULERS": "slurm", "REMEDIATE_SLURM_CONF": "/etc/slurm/slurm.conf"}, "python"),
        ({"REMEDIATE_SCHEDULERS": "kubernetes", "REMEDIATE_BURNIN_PYTHON": "/opt/py/bin/python"}, "image"),
        ({"REMEDIATE_BURNIN_PYTHON": "/opt/py/bin/python", "REMEDIATE_BURNIN_IMAGE": "site/img:1"}, "namespace"),
        # Slurm on Kubernetes: the Slurm side has its python, the Kubernetes side still lacks its image.
        ({"REMEDIATE_SCHEDULERS": "kubernetes,slurm", "REMEDIATE_SLURM_CONF": "/etc/slurm/slurm.conf",
          "REMEDIATE_BURNIN_PYTHON": "/opt/py/bin/python"}, "image"),
    ],
)  # fmt: skip
def test_a_table_without_what_the_schedulers_burn_in_runs_is_refused_at_load_naming_both(
    env: dict[str, str], missing: str
) -> None:
    settings = load_settings(env={**env, "REMEDIATE_BURNIN_BASELINES": json.dumps(TABLE)})
    with pytest.raises(ConfigError) as refused:
        check_burnin(settings.burnin, settings.engine.schedulers)
    assert f"burnin_baselines is set but burnin_{missing} is not" in str(refused.value)
    assert f"REMEDIATE_BURNIN_{missing.upper()}" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "env",
    [
        {},  # no table: the burn-in is skipped, whatever else is unset
        {"REMEDIATE_SCHEDULERS": "slurm", "REMEDIATE_SLURM_CONF": "/etc/slurm/slurm.conf",
         "REMEDIATE_BURNIN_BASELINES": json.dumps(TABLE), "REMEDIATE_BURNIN_PYTHON": "/opt/py/bin/python"},
        {"REMEDIATE_BURNIN_BASELINES": json.dumps(TABLE), "REMEDIATE_BURNIN_PYTHON": "/opt/py/bin/python",
         "REMEDIATE_BURNIN_IMAGE": "site/img:1", "REMEDIATE_BURNIN_NAMESPACE": "gpu-ops"},
        {"REMEDIATE_SCHEDULERS": "none", "REMEDIATE_BURNIN_BASELINES": json.dumps(TABLE)},  # no burn-in step loads
    ],
)  # fmt: skip
def test_burnin_settings_that_serve_the_schedulers_in_force_pass(env: dict[str, str]) -> None:
    settings = load_settings(env=env)
    check_burnin(settings.burnin, settings.engine.schedulers)


def test_serve_refuses_to_start_with_a_table_and_no_image_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import remediate.serve.launcher

    def no_gunicorn(*args: Any) -> None:
        pytest.fail("the server started: preflight should have refused the burn-in settings")

    monkeypatch.setattr(remediate.serve.launcher, "_GunicornApp", no_gunicorn)
    (tmp_path / "playbooks").mkdir()
    for name in list(os.environ):
        if name.startswith("REMEDIATE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("REMEDIATE_BURNIN_BASELINES", json.dumps(TABLE))
    monkeypatch.setenv("REMEDIATE_BURNIN_PYTHON", "/opt/py/bin/python")

    result = cli("serve", "--insecure-no-auth", "--playbooks", tmp_path / "playbooks",
                 "--database-url", f"sqlite:///{tmp_path / 'serve.db'}")  # fmt: skip

    assert_one_line_error(result, "burnin_baselines is set but burnin_image is not", "schedulers names kubernetes")
