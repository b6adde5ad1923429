"""Slurm as remediate uses it: `sinfo --json` and `squeue --json` to read, `scontrol` to change nodes and jobs,
`scancel --signal` to signal a job, `srun --no-allocate` to run a burn-in on a drained node.

Who calls it: the slurm.* actions (remediate.actions.slurm). Each call runs one command with an argv list
(never a shell), a time-out (slurm_command_timeout) and an environment of its own: PATH, SLURM_CONF (the
cluster's slurm.conf, slurm_conf) and LC_ALL=C (Slurm's messages, which `_failure` reads, in English). The
process's own environment is neither read nor changed, so one server could talk to two clusters.

No cluster is found by itself: without slurm_conf every call fails with SlurmConfigError saying to set it,
even where /etc/slurm/slurm.conf exists (a test alert on an operator's machine must not drain a production
node), as the Kubernetes client never reads ~/.kube/config on its own.

A command that times out may have reached slurmctld. That is still SlurmUnavailable (retryable): the
actions are idempotent, and each decides again from a fresh read, so a retry finds its change done.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from shutil import which

from remediate.slurm.errors import SlurmConfigError, SlurmError, SlurmNodeNotFound, SlurmUnavailable
from remediate.slurm.jobs import ON_A_NODE, SlurmJob, parse_jobs
from remediate.slurm.model import SlurmNode, parse_nodes
from remediate.slurm.names import check_node_name
from remediate.slurm.reason import REASON_MAX, safe_text
from remediate.slurm.shownode import parse_show_node
from remediate.slurm.signals import check_signal

NO_ALLOCATE_DENIED = "Access/permission denied"
"""What srun --no-allocate says run by a user neither root nor SlurmUser (22.05.8: the step's launch refused by the
node's slurmd, exit 210)."""
NO_ALLOCATE_WHO = (
    "srun --no-allocate runs only as root or SlurmUser: run the burn-in's caller, `remediate node release` "
    "or the server, as one of them"
)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
"""Where the Slurm commands are looked for without slurm_bin_dir (Debian's slurm-client puts them in /usr/bin)."""

UNAVAILABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Connection refused",
    "Communication connection failure",
    "Slurm backup controller in standby mode",
)
"""Slurm's words (22.05) for a slurmctld that did not answer; any other failure is a refusal."""
NOT_FOUND = ("Invalid node name specified", "not found")
"""... and for one that does not exist (`scontrol show node`: `Node gpu-99 not found`)."""


@dataclass(frozen=True)
class SlurmClient:
    """Stateless and thread-safe: executor threads share one instance."""

    _: KW_ONLY
    conf: Path | None = None
    """The cluster's slurm.conf (slurm_conf); None: no cluster, every call fails with SlurmConfigError."""
    bin_dir: Path | None = None
    """Directory of scontrol, sinfo, squeue, scancel and srun (slurm_bin_dir); None: DEFAULT_PATH."""
    timeout: float = 30.0
    """Seconds one command may take (slurm_command_timeout); longer counts as slurmctld not answering."""
    on_command: Callable[[str], None] | None = field(default=None, compare=False)
    """Called with the tool's name (`sinfo`, `scontrol`, `squeue`, `scancel`) before each command runs: how the
    commands a process sends slurmctld are counted (the metric remediate_slurm_commands_total; the tests)."""

    @property
    def configured(self) -> bool:
        return self.conf is not None

    # ------------------------------------------------------------------ reads

    def nodes(self) -> tuple[SlurmNode, ...]:
        """Every node of the cluster, from one `sinfo --json`: the cluster-wide read, which only the shared
        node cache (remediate.slurm.nodecache) makes, once per slurm_poll_interval, never one per step."""
        text = self._run("sinfo", "--json")
        try:
            answer = json.loads(text)
        except ValueError as exc:
            raise SlurmError(f"sinfo --json: not JSON ({exc}): {text[:200]!r}") from exc
        return parse_nodes(answer)

    def node(self, name: str) -> SlurmNode:
        """The node NodeName `name` as it is now, from one `scontrol -o show node NAME` (remediate.slurm.shownode):
        the fresh read of the node a step decides on. SlurmNodeNotFound when Slurm has no such NodeName."""
        if problem := check_node_name(name):
            raise SlurmError(f"node name {problem}")
        return parse_show_node(self._run("scontrol", "-o", "show", "node", name))

    def jobs_on(self, name: str) -> tuple[SlurmJob, ...]:
        """The jobs holding node `name` now (running, suspended, completing), from one `squeue --json`
        (`-w NAME` is ignored with --json on 22.05, as sinfo's `-n`: the jobs are filtered here)."""
        text = self._run("squeue", "--json")
        try:
            answer = json.loads(text)
        except ValueError as exc:
            raise SlurmError(f"squeue --json: not JSON ({exc}): {text[:200]!r}") from exc
        return tuple(job for job in parse_jobs(answer) if name in job.nodes and job.state in ON_A_NODE)

    def ping(self) -> str:
        """`scontrol ping`: whether slurmctld answers (its own line, `Slurmctld(primary) at X is UP`)."""
        return self._run("scontrol", "ping").strip()

    def show_config(self) -> str:
        """`scontrol show config`: the controller's running configuration (SlurmUser, ...), `Key = value` lines."""
        return self._run("scontrol", "show", "config")

    # ------------------------------------------------------------------ changes

    def requeue(self, job_id: int) -> None:
        """`scontrol requeue <job_id>`: the batch job stops and goes back to the queue, to start again elsewhere."""
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
            raise SlurmError(f"not a job id: {job_id!r}")
        self._run("scontrol", "requeue", str(job_id))

    def signal(self, job_id: int, signal: str) -> None:
        """`scancel --signal=<signal> --full --state=RUNNING <job_id>`: the job's batch shell and every step of it
        get `signal` (without --full a batch job's shell gets none, and a job run in it, not under srun, would
        not see it); the job keeps running unless it ends itself. Only a signal of remediate.slurm.signals'
        allow-list.

        --state=RUNNING: a job no longer running by the time this runs (it requeued itself since the read) gets
        nothing, and scancel answers success. Without it scancel retries a pending job ("Job is in transitional
        state") until the time-out, and would signal it once it runs again, on another node (checked on
        22.05.8). A job that has ended is Slurm's `Invalid job id specified`: SlurmError."""
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
            raise SlurmError(f"not a job id: {job_id!r}")
        if problem := check_signal(signal):
            raise SlurmError(f"refusing to signal job {job_id}: {problem}")
        self._run("scancel", f"--signal={signal}", "--full", "--state=RUNNING", str(job_id))

    def drain(self, name: str, reason: str) -> None:
        """`scontrol update NodeName=<name> State=DRAIN Reason=<reason>`: running jobs finish, none start."""
        if reason != safe_text(reason) or not reason or len(reason) > REASON_MAX:
            raise SlurmError(f"refusing a drain reason Slurm would not keep as written: {reason!r}")
        self._update(name, "State=DRAIN", f"Reason={reason}")

    def set_reason(self, name: str, reason: str) -> None:
        """`scontrol update NodeName=<name> Reason=<reason>`: the reason of a drained node replaced, its state
        kept (checked on 22.05.8: DRAIN stays; on a node in service Slurm keeps no reason and answers success
        all the same, so the caller reads the node back). No State= on purpose: a node a person resumed since
        it was read is not drained again."""
        if reason != safe_text(reason) or not reason or len(reason) > REASON_MAX:
            raise SlurmError(f"refusing a reason Slurm would not keep as written: {reason!r}")
        self._update(name, f"Reason={reason}")

    def resume(self, name: str) -> None:
        """`scontrol update NodeName=<name> State=RESUME`: DRAIN cleared, the node takes jobs again."""
        self._update(name, "State=RESUME")

    def run_on_drained(self, name: str, argv: list[str], *, chdir: Path, timeout: float) -> str:
        """`srun --no-allocate -w <name> -N1 -n1 --chdir=<chdir> <argv...>`: `argv` run once on node `name`, its
        stdout. --no-allocate makes no job and takes no resources, so it runs on a drained node and leaves it
        drained (checked on 22.05.8: a plain srun, --exclusive, or one in a `Flags=MAINT,IGNORE_JOBS` reservation
        of the drained node all wait for resources and fail, `Required node not available`); Slurm lets only
        root and SlurmUser use it. `timeout` replaces slurm_command_timeout: the program runs for a while."""
        if problem := check_node_name(name):
            raise SlurmError(f"node name {problem}")
        if not argv or not argv[0].startswith("/") or not chdir.is_absolute():
            raise SlurmError(f"refusing to run {argv!r} in {chdir}: the program and directory must be absolute paths")
        try:
            return self._run("srun", "--no-allocate", f"--nodelist={name}", "--nodes=1", "--ntasks=1",
                             f"--chdir={chdir}", *argv, timeout=timeout)  # fmt: skip
        except SlurmError as exc:
            if NO_ALLOCATE_DENIED not in str(exc):
                raise
            raise SlurmError(f"{exc} ({NO_ALLOCATE_WHO})") from exc

    def _update(self, name: str, *changes: str) -> None:
        if problem := check_node_name(name):
            raise SlurmError(f"node name {problem}")
        self._run("scontrol", "update", f"NodeName={name}", *changes)

    # ------------------------------------------------------------------ commands

    def _run(self, tool: str, *args: str, timeout: float | None = None) -> str:
        """stdout of `tool args...`; the errors of remediate.slurm.errors for anything else."""
        if self.conf is None:
            raise SlurmConfigError(
                "no Slurm cluster configured: set slurm_conf / REMEDIATE_SLURM_CONF to the cluster's slurm.conf "
                "(remediate never picks /etc/slurm/slurm.conf or $SLURM_CONF on its own)"
            )
        if not self.conf.is_file():
            raise SlurmConfigError(f"slurm_conf {self.conf} is not a file: set it to the cluster's slurm.conf")
        path = str(self.bin_dir) if self.bin_dir is not None else DEFAULT_PATH
        program = which(tool, path=path)
        if program is None:
            raise SlurmConfigError(f"no {tool} in {path}: install slurm-client, or set slurm_bin_dir to its directory")
        argv = [program, *args]
        if self.on_command is not None:
            self.on_command(tool)
        shown = " ".join([tool, *args])
        env = {"PATH": path, "SLURM_CONF": str(self.conf), "LC_ALL": "C"}
        limit = self.timeout if timeout is None else timeout
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit, check=False)
        except subprocess.TimeoutExpired as exc:
            bound = "slurm_command_timeout" if timeout is None else "the command's own time-out"
            raise SlurmUnavailable(f"{shown}: no answer within {limit:g} s ({bound})") from exc
        except OSError as exc:
            raise SlurmConfigError(f"{shown}: cannot run {program}: {exc.strerror or exc}") from exc
        if done.returncode != 0:
            raise _failure(shown, done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}")
        return done.stdout


def _failure(command: str, words: str) -> SlurmError | SlurmUnavailable:
    text = f"{command}: {' '.join(words.split())[:300]}"
    if any(sign in words for sign in UNAVAILABLE):
        return SlurmUnavailable(text)
    if any(sign in words for sign in NOT_FOUND):
        return SlurmNodeNotFound(text)
    return SlurmError(text)
