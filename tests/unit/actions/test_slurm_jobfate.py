"""What slurm.requeue does to each job on the node (requeue, signal, leave running), from Slurm's words about it
(batch, requeue allowed), its comment and the step's `signal` param; and how the param is checked at load."""

from __future__ import annotations

from remediate.actions.slurm.jobfate import ASKED_BY_JOB, ASKED_BY_STEP, How, decide, split
from remediate.actions.slurm.requeue import SlurmRequeueAction
from remediate.slurm import SlurmJob


def job(
    job_id: int, *, batch: bool = True, requeue: bool = True, comment: str = "", state: str = "RUNNING"
) -> SlurmJob:
    return SlurmJob(job_id, f"job-{job_id}", "ana", state, ("gpu-01",), batch, requeue, comment=comment)


def test_without_a_signal_asked_the_jobs_are_requeued_or_left_running_as_slurm_allows() -> None:
    fates = split([job(1), job(2, requeue=False), job(3, batch=False)], None)
    assert [f.job.job_id for f in fates.requeue] == [1] and fates.signal == []
    assert [f.job.job_id for f in fates.leave] == [2, 3]
    assert "does not allow requeueing" in (fates.leave[0].why or "") and "not a batch job" in (fates.leave[1].why or "")
    assert fates.would() == "requeue jobs 1"


def test_a_job_asking_for_a_signal_gets_it_even_when_slurm_could_not_requeue_it() -> None:
    lightning = decide(job(1, comment="remediate-signal=USR1"), None)
    assert (lightning.how, lightning.signal, lightning.asked_by) == (How.SIGNAL, "USR1", ASKED_BY_JOB)
    srun = decide(job(2, batch=False, comment="remediate-signal=USR2"), "USR1")  # the job's word wins
    assert (srun.how, srun.signal, srun.asked_by) == (How.SIGNAL, "USR2", ASKED_BY_JOB)
    assert srun.entry() | {"nodes": []} == {"job_id": 2, "name": "job-2", "user": "ana", "state": "RUNNING",
                                            "nodes": [], "signal": "USR2", "asked_by": ASKED_BY_JOB}  # fmt: skip


def test_the_steps_signal_goes_to_the_requeueable_jobs_that_did_not_opt_out() -> None:
    fates = split([job(1), job(2, comment="remediate-signal=none"), job(3, requeue=False)], "USR1")
    assert [(f.job.job_id, f.signal, f.asked_by) for f in fates.signal] == [(1, "USR1", ASKED_BY_STEP)]
    assert [f.job.job_id for f in fates.requeue] == [2]
    (left,) = fates.leave
    assert left.job.job_id == 3 and "goes only to a job Slurm could requeue" in (left.why or "")
    assert fates.would() == "requeue jobs 2; signal job 1 (USR1)"


def test_a_token_that_cannot_be_honoured_is_named_and_the_job_treated_as_if_it_asked_nothing() -> None:
    bad = decide(job(1, comment="remediate-signal=KILL"), None)
    assert bad.how is How.REQUEUE and "not one of" in bad.entry()["note"]
    with_step = decide(job(2, comment="remediate-signal=KILL"), "USR2")
    assert (with_step.how, with_step.signal) == (How.SIGNAL, "USR2") and "note" in with_step.entry()


def test_the_signal_param_is_an_allowed_name_written_in_the_playbook() -> None:
    schema = SlurmRequeueAction.schema
    assert schema.check_static({"signal": "USR1"}) == []
    assert any("signal" in problem for problem in schema.check_static({"signal": "KILL"}))
    assert any("signal" in problem for problem in schema.check_static({"signal": "{{ labels.sig }}"}))


def test_a_job_not_running_is_never_signalled_and_handled_as_if_it_asked_nothing() -> None:
    fates = split([job(1, state="SUSPENDED", comment="remediate-signal=USR1"),
                   job(2, state="COMPLETING", batch=False, comment="remediate-signal=USR1")], "USR2")  # fmt: skip
    assert fates.signal == [] and [f.job.job_id for f in fates.requeue] == [1]
    assert [f.job.job_id for f in fates.leave] == [2] and "not a batch job" in (fates.leave[0].why or "")
    assert "SUSPENDED, not running" in fates.requeue[0].entry()["note"]
