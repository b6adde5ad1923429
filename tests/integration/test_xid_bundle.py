"""The quarantine bundle: xid.rules.yml's alerts feed playbooks/gpu-xid-quarantine.yaml, and its dry-run plans.

Every alert the rules' promtool unit tests (xid.rules.test.yml) expect is turned into an
AlertManager notification and judged with the shipped playbooks; then `remediate dry-run`
plans the shipped playbook against the test API server (node, pods, PDBs, breaker) without
changing anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from remediate.cli import main
from tests.support.fake_apiserver import FakeKubeAPI, cluster
from tests.support.rules import ROOT, as_alert, expected_alerts, rules_of, shipped_engine

QUARANTINE = "gpu-xid-quarantine"


def test_the_rule_tests_see_every_rule_fire() -> None:
    rules = {rule["alert"] for rule in rules_of("xid")}
    assert rules == {"GPUXidCritical", "GPURowRemapFailure"}  # RemediateCircuitBreakerOpen: remediate.rules.yml
    assert {name for name, _, _ in expected_alerts("xid")} == rules


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_every_node_alert_of_the_rules_is_quarantined_by_the_shipped_playbook(status: str) -> None:
    engine = shipped_engine()  # a Kubernetes site (the default `schedulers`): the slurm.* steps are left out
    checked = 0
    for alertname, labels, expected_annotations in expected_alerts("xid"):
        alert = as_alert(alertname, labels, expected_annotations, status)
        evaluations = {e.playbook.name: e for e in engine.evaluate(alert)}
        assert set(evaluations) == {QUARANTINE}  # it tells on-call itself: no second message
        quarantine = evaluations[QUARANTINE]
        assert quarantine.error is None, quarantine.error
        assert quarantine.target == (labels.get("Hostname") or labels["hostname"])
        # A ladder: drain (after every training job of the node checkpointed), then reset the GPUs, then keep out
        # and hand off.
        rungs = [[s.spec.action for s in rung.steps] for rung in quarantine.rungs]
        assert all(rung.error is None for rung in quarantine.rungs)
        if status == "firing":
            assert rungs == [
                ["training.checkpoint_node", "k8s.cordon", "k8s.taint", "k8s.drain", "notify"],
                ["gpu.reset", "notify"],
                ["k8s.cordon", "k8s.handoff", "notify"],  # The last rung hands off to breakfix
            ]
            taint = quarantine.rungs[0].steps[2].params
            assert taint == {
                "key": "remediate.io/gpu-unhealthy",
                "value": alertname.lower(),
                "effect": "NoSchedule",
                "note": expected_annotations["summary"],
            }
            assert quarantine.rungs[1].steps[0].params["gpu"] == "all"
            handoff = quarantine.rungs[2].steps[1].params
            assert (handoff["sink"], handoff["why"]) == (
                "breakfix",
                f"{alertname} still reported after a drain and a GPU reset",
            )
        else:
            # Undone only past the re-admission gate (a soak of the node's own health checks, then the burn-in,
            # which with no burnin_* settings skips itself); a failed gate hands the node to breakfix (an `always`
            # step acting only after the soak or the burn-in failed).
            assert rungs == [
                ["check.prometheus", "gpu.health", "k8s.burnin", "k8s.untaint", "k8s.uncordon", "k8s.handoff"],
                [],
                [],
            ]
            gate, burnin, handoff = (quarantine.rungs[0].steps[i] for i in (1, 2, 5))
            assert (gate.spec.name, gate.params["soak"], gate.params["every"], gate.params["diag"]) == (
                "gate", "30m", "5m", 1
            )  # fmt: skip
            assert (gate.spec.timeout or 0) >= 30 * 60 + 60 and not gate.spec.always
            assert (handoff.params["after_failed"], handoff.params["sink"], handoff.spec.always) == (
                ["gate", "burnin", "k8s-burnin"], "breakfix", True
            )  # fmt: skip
            # No site table: the step writes none and gets none (it reports itself skipped when it runs).
            assert "baselines" not in burnin.params and (burnin.spec.timeout or 0) >= 5 * 60 + 60
            assert quarantine.rungs[0].steps[4].params["scope"] == "alert"
            # Undone only on evidence: every GPU the node reported in the last day reports again, for 10 minutes.
            proven = quarantine.rungs[0].steps[0].params
            host = labels.get("Hostname") or labels["hostname"]
            # Either exporter generation's name and node label: the query needs no recording rule.
            both = '{__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_TEMP_CELSIUS", '
            for node_label in ("Hostname", "hostname"):
                assert f'{both}{node_label}="{host}"}}' in proven["query"], proven["query"]
            assert proven["for"] == "10m"
            assert [s.spec.action for s in quarantine.steps] == ["notify"]
        checked += 1
    assert checked >= 9


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_a_slurm_site_runs_the_same_ladder_with_the_slurm_steps(status: str) -> None:
    """One shipped ladder for both schedulers: on a Slurm site the drain rung drains and requeues, the keep-out
    rung drains and hands off, the undo checks and resumes; the Kubernetes steps are left out."""
    engine = shipped_engine("slurm")
    for alertname, labels, expected_annotations in expected_alerts("xid"):
        (quarantine,) = [e for e in engine.evaluate(as_alert(alertname, labels, expected_annotations, status))]
        assert quarantine.error is None, quarantine.error
        rungs = [[s.spec.action for s in rung.steps] for rung in quarantine.rungs]
        if status == "firing":
            assert rungs == [
                ["training.checkpoint_node", "slurm.drain", "slurm.requeue", "notify"],
                ["gpu.reset", "notify"],
                ["slurm.drain", "slurm.handoff", "notify"],
            ]
            # The GPUs and XIDs the summary names, first in the drain reason (sinfo -R's column is narrow).
            assert quarantine.rungs[0].steps[1].params["note"] == expected_annotations["summary"].split(": ", 1)[-1]
            assert quarantine.rungs[2].steps[1].params["sink"] == "breakfix"
        else:
            undo = ["check.prometheus", "gpu.health", "slurm.burnin", "slurm.resume", "slurm.handoff"]
            assert rungs == [undo, [], []]
            assert quarantine.rungs[0].steps[4].params["after_failed"] == ["gate", "burnin", "k8s-burnin"]
        left_out = {s.action for s in quarantine.playbook.left_out}
        assert left_out == {
            "k8s.cordon", "k8s.taint", "k8s.drain", "k8s.burnin", "k8s.untaint", "k8s.uncordon", "k8s.handoff"
        }  # fmt: skip


def dry_run(tmp_path: Path, alertname: str, node_label: str, *more: str) -> Result:
    """`remediate dry-run` of a critical alert of that node, with the shipped playbooks."""
    database = f"sqlite:///{tmp_path / 'none.db'}"
    args = ["--playbooks", ROOT / "playbooks", "--database-url", database, "--alertname", alertname]
    args += ["--label", "severity=critical", "--label", node_label, *more]
    return CliRunner().invoke(main, ["dry-run", *map(str, args)], catch_exceptions=False)


def test_dry_run_plans_the_quarantine_against_the_cluster_and_changes_nothing(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("REMEDIATE_CONFIG", "REMEDIATE_DATABASE_URL", "REMEDIATE_PLAYBOOKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REMEDIATE_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("REMEDIATE_SINKS", "{oncall: {type: slack, url_file: /etc/remediate/sinks/oncall/url}}")
    cluster(kube_api, 20, prefix="node")
    kube_api.add_pod("ml", "trainer-0", "node-07", labels={"app": "trainer"})
    kube_api.add_pod("ml", "trainer-1", "node-07", labels={"app": "trainer"})
    kube_api.add_pod("kube-system", "dcgm-exporter-7", "node-07", owner="DaemonSet", owner_name="dcgm-exporter")
    kube_api.add_pdb("ml", "trainer", {"app": "trainer"}, disruptions_allowed=1)

    result = dry_run(tmp_path, "GPUXidCritical", "Hostname=node-07", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    (entry,) = report["alerts"]
    plans = {p["playbook"]: p for p in entry["playbooks"]}
    steps = {s["name"]: s for s in plans[QUARANTINE]["steps"]}
    cordon = steps["cordon"]["plan"]
    assert cordon["found"] is True and cordon["current"]["unschedulable"] is False
    assert cordon["breaker"]["cap"] == 2  # min(10% of 20 nodes, 3)
    assert cordon["breaker"]["would_be"].startswith("allowed")
    drain = steps["drain"]["plan"]
    assert [(p["pod"], p["blocked_by"] is not None) for p in drain["would_evict"]] == [
        ("ml/trainer-0", False),
        ("ml/trainer-1", True),
    ]
    assert drain["pdbs_that_would_block"] == ["ml/trainer"]
    assert [s["pod"] for s in drain["would_skip"]] == ["kube-system/dcgm-exporter-7"]
    assert steps["taint"]["plan"]["would"] == "add remediate.io/gpu-unhealthy=gpuxidcritical:NoSchedule"
    notify = steps["notify"]["plan"]
    assert (notify["can_act"], notify["would_post_to"]) == (True, "the URL in /etc/remediate/sinks/oncall/url")
    assert kube_api.changes == []
    assert {m for m, _, _ in kube_api.requests} == {"GET"}


def test_dry_run_of_a_node_that_does_not_exist_says_so(
    kube_api: FakeKubeAPI, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMEDIATE_KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("REMEDIATE_CONFIG", raising=False)
    result = dry_run(tmp_path, "GPURowRemapFailure", "hostname=ghost-1")
    assert result.exit_code == 1  # a plan that fails: the run cannot succeed
    assert (
        "plan failed: ActionError: node 'ghost-1' (from label hostname) does not exist in the cluster" in result.output
    )


def test_the_overheat_and_fail_slow_ladders_carry_their_slurm_steps_on_a_slurm_site() -> None:
    """The other two shipped ladders with node steps, as a Slurm site loads them: drained, not cordoned; fail-slow
    restarts a Slurm job by a checkpoint then a requeue (jobs: slurm), not by the launcher's exit 75."""
    loaded = {p.name: p for p in shipped_engine("slurm").playbooks.playbooks}
    overheat, fail_slow = loaded["gpu-overheat"], loaded["training-fail-slow"]
    assert [s.action for s in overheat.rungs[2].steps] == ["training.checkpoint_node", "slurm.drain", "notify"]
    assert [s.action for s in overheat.rungs[2].on_resolved] == ["check.prometheus", "slurm.resume"]
    rung = {s.name: s for s in fail_slow.rungs[1].steps}
    assert list(rung) == ["slurm-drain", "checkpoint", "requeue", "notify"]
    assert rung["checkpoint"].params["command"] == "checkpoint" and rung["checkpoint"].run_on == ("control_node",)
    assert [s.action for s in fail_slow.rungs[1].on_resolved] == ["check.prometheus", "slurm.resume"]
    assert [s.action for s in fail_slow.rungs[2].steps] == ["slurm.drain", "slurm.handoff", "notify"]
    on_kubernetes = {p.name: p for p in shipped_engine().playbooks.playbooks}["training-fail-slow"]
    launcher = {s.name: s.action for s in on_kubernetes.rungs[1].steps}
    assert "restart" in launcher and "checkpoint" not in launcher  # a Kubernetes site: the launcher's path
