"""A real Slurm cluster for the tests (fixture `slurm_cluster`, one per session and xdist worker; `slurm`, the
same cluster with every node back in service for each test): Debian's slurmctld, slurmd and munged (22.05.8),
in a temp dir, on free ports, stopped and removed afterwards.

The cluster (docs of the recipe: /work/shared/reference/slurm.md in the project's notes):

- its own munged, key and socket in the temp dir (slurm.conf's AuthInfo names the socket, so neither the host's
  munge nor an environment variable is used);
- slurmctld and one slurmd, the one node that runs jobs: this host, NodeName = its short host name;
- six more nodes declared in slurm.conf, gpu-01 .. gpu-06, without a slurmd of their own (their address is
  this host's, so its slurmd answers for them and they stay up: they take DRAIN and RESUME as any node);
- two partitions: `train` (this host, gpu-01 .. gpu-04) and `debug` (gpu-05, gpu-06);
- features (staged rollout's waves, tests/integration/test_rollout_slurm.py): every gpu-0x has `gpu`; gpu-01 and
  gpu-02 have `wave1` too, gpu-03 `wave1` and `wave2` (WAVE_FEATURES).

SlurmdTimeout=0: slurmctld pings and asks for registrations only the nodes that are not (yet) known and
responding. With pings (every SlurmdTimeout/3) it asks the slurmd-less nodes to register too; this host's slurmd
answers for each with its own jobs, and slurmctld kills a job it placed on a gpu-0x node that it finds running here
("on wrong node"): a requeued job that Slurm starts again on gpu-01 (tests/e2e/test_slurm_failslow.py) would die
at the next ping, up to 100 s later.

Each daemon runs in the foreground (-D, munged -F) as a child of the test process, so its pid (the one its pid
file holds) is known from the start, it is never reparented, and stopping it is SIGTERM to that pid, then
SIGKILL. No daemon outlives the session: an atexit hook stops whatever an interrupted run left. The daemons run
as root (SlurmUser=root): as another user the fixture skips, or fails where REMEDIATE_SLURM_REQUIRED=1
(scripts/test sets it). remediate reaches the cluster through the `slurm_conf` setting only: nothing here changes
this process's environment.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from remediate.actions import action_classes
from remediate.actions.base import ActionMemory, InMemoryMemory, StepContext
from remediate.actions.slurm import SlurmAction, SlurmOptions
from remediate.breaker import CircuitBreaker
from remediate.intake.alerts import alert_ref
from remediate.slurm import SlurmClient, SlurmNodeCache
from tests.support.processes import log_tail
from tests.support.realsystems import free_port
from tests.support.waiting import scaled, wait_until

REQUIRED_VARIABLE = "REMEDIATE_SLURM_REQUIRED"
INSTALL_HINT = "apt-get install slurmctld slurmd slurm-client munge (scripts/test does, as root)"
PROGRAMS = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd",
            "scontrol": "/usr/bin/scontrol", "sinfo": "/usr/bin/sinfo", "squeue": "/usr/bin/squeue",
            "sbatch": "/usr/bin/sbatch", "scancel": "/usr/bin/scancel"}  # fmt: skip
OTHER_NODES = tuple(f"gpu-{i:02d}" for i in range(1, 7))
TRAIN_OTHERS, DEBUG_NODES = OTHER_NODES[:4], OTHER_NODES[4:]
WAVE_FEATURES = {"gpu-01": ("wave1",), "gpu-02": ("wave1",), "gpu-03": ("wave1", "wave2")}
"""The features beyond `gpu` that slurm.conf gives nodes (the others have none)."""
WIDE_REASONS = "%60E %9u %N"
"""`sinfo -R -o` format: the whole reason (the default cuts it at 20 characters), who set it, the nodes."""


def missing_requirements() -> list[str]:
    missing = [f"{name} ({INSTALL_HINT})" for name, path in PROGRAMS.items() if not Path(path).exists()]
    if os.geteuid() != 0:
        missing.append("root (slurmctld and slurmd run as SlurmUser=root, munged with its key in a temp dir)")
    return missing


@dataclass
class SlurmCluster:
    root: Path
    host: str
    ctld_port: int
    slurmd_port: int
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    caches: list[SlurmNodeCache] = field(default_factory=list)
    """The node caches made by `node_cache`, stopped when the test that made them ends (the `slurm` fixture)."""

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.host, *OTHER_NODES)

    @property
    def train(self) -> tuple[str, ...]:
        return (self.host, *TRAIN_OTHERS)

    @property
    def debug(self) -> tuple[str, ...]:
        return DEBUG_NODES

    # ------------------------------------------------------------------ start and stop

    @classmethod
    def start(cls) -> SlurmCluster:
        root = Path(tempfile.mkdtemp(prefix="remediate-slurm-"))
        cluster = cls(root, socket.gethostname().split(".")[0], free_port(), free_port())
        _running.append(cluster)
        try:
            cluster._write_config()
            cluster._spawn("munged", PROGRAMS["munged"], "-F", f"--key-file={root}/munge/key",
                           f"--socket={root}/munge/sock", f"--pid-file={root}/munge/pid",
                           f"--log-file={root}/munge/log", f"--seed-file={root}/munge/seed", "--force")  # fmt: skip
            wait_until(lambda: (root / "munge" / "sock").exists(), 10, message="munged's socket")
            cluster.start_controller(nodes_answering=False)
            cluster._spawn("slurmd", PROGRAMS["slurmd"], "-D", "-f", str(cluster.conf))
            wait_until(cluster._host_registered, 30, interval=0.2, message=f"slurmd on {cluster.host} registered")
            cluster.wait_nodes_answering()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _write_config(self) -> None:
        for sub in ("spool", "state", "log", "run", "munge"):
            (self.root / sub).mkdir()
        key = self.root / "munge" / "key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        os.chmod(self.root / "munge", 0o700)
        r = self.root
        train = ",".join(self.train)
        self.conf.write_text(
            f"""ClusterName=remediate-test
SlurmctldHost={self.host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/munge/sock
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
ReturnToService=2
MessageTimeout=3
SlurmdTimeout=0
NodeName={self.host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=gpu-[01-02] NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Feature=gpu,wave1 State=UNKNOWN
NodeName=gpu-03 NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Feature=gpu,wave1,wave2 State=UNKNOWN
NodeName=gpu-[04-06] NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Feature=gpu State=UNKNOWN
PartitionName=train Nodes={train} Default=YES MaxTime=INFINITE State=UP
PartitionName=debug Nodes={",".join(self.debug)} MaxTime=INFINITE State=UP
""",
            encoding="utf-8",
        )

    def _spawn(self, name: str, *argv: str) -> None:
        log = (self.root / "log" / f"{name}.out").open("ab")
        with log:
            self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                cwd=self.root, env=self.env())  # fmt: skip

    def env(self) -> dict[str, str]:
        """The environment of a Slurm command run against this cluster (what SlurmClient gives its commands)."""
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(self.conf), "LC_ALL": "C"}

    def start_controller(self, *, nodes_answering: bool = True) -> None:
        """slurmctld, started (again: it recovers the nodes' states from StateSaveLocation), answering sinfo."""
        self._spawn("slurmctld", PROGRAMS["slurmctld"], "-D", "-f", str(self.conf))
        wait_until(lambda: self.run("sinfo", "-h", check=False).returncode == 0, 30, interval=0.2,
                   message=f"slurmctld answering sinfo; log: {self._logs('slurmctld')}")  # fmt: skip
        if nodes_answering:
            self.wait_nodes_answering()

    def wait_nodes_answering(self) -> None:
        # Until its first ping (a few seconds) slurmctld holds every node UNKNOWN, a state in which RESUME
        # answers an error: the tests start from nodes that answered.
        wait_until(self._all_known, 30, interval=0.2, message=f"every node answering; {self._logs('slurmctld')}")

    def _all_known(self) -> bool:
        done = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        rows = [line.split() for line in done.stdout.splitlines()]
        return done.returncode == 0 and len(rows) == len(self.nodes) and all("unknown" not in r[-1] for r in rows)

    def _logs(self, name: str) -> str:
        logs = self.root / "log"
        return f"{name}.log: {log_tail(logs / f'{name}.log')}\n{name}.out: {log_tail(logs / f'{name}.out')}"

    def stop_controller(self) -> None:
        self._stop("slurmctld")

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=scaled(10))

    def stop(self) -> None:
        if "slurmctld" in self.procs and "slurmd" in self.procs:
            # A job's processes (slurmstepd and its task) would outlive slurmd: end every job first.
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                self.cancel_jobs()
        for name in ("slurmd", "slurmctld", "munged"):
            self._stop(name)
        self._kill_leftover_jobs()
        with contextlib.suppress(ValueError):
            _running.remove(self)
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover_jobs(self) -> None:
        """SIGKILL to what a job of this cluster left running (its script, under this cluster's spool, and the
        slurmstepd above it): found by this cluster's own directory, so never another cluster's."""
        found: set[int] = set()
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if proc.name.isdigit() and str(self.root).encode() in (proc / "cmdline").read_bytes():
                    found.add(int(proc.name))
                    parent = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
                    if (Path("/proc") / str(parent) / "cmdline").read_bytes().startswith(b"slurmstepd"):
                        found.add(parent)
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def pids(self) -> dict[str, int]:
        """The pid of each running daemon, as its pid file says (what `stop` signals: the same process)."""
        files = {"munged": "munge/pid", "slurmctld": "run/slurmctld.pid", "slurmd": "run/slurmd.pid"}
        found = {}
        for name, path in files.items():
            with contextlib.suppress(OSError, ValueError):
                found[name] = int((self.root / path).read_text().strip())
        return found

    # ------------------------------------------------------------------ reading and changing, as a person does

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run_with(self.env(), *argv, check=check)

    def run_with(self, env: dict[str, str], *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command in `env` (srun passes it on to the job's tasks)."""
        done = subprocess.run([PROGRAMS.get(argv[0], argv[0]), *argv[1:]], env=env, capture_output=True,
                              text=True, timeout=scaled(30), check=False)  # fmt: skip
        if check:
            assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr or done.stdout}"
        return done

    def reasons(self) -> str:
        """`sinfo -R` with the whole reason: one line per reason, `reason user nodes`."""
        return self.run("sinfo", "-R", "-h", "-o", WIDE_REASONS).stdout

    def show_node(self, name: str) -> str:
        return self.run("scontrol", "-o", "show", "node", name).stdout

    def drained(self, name: str) -> bool:
        """Whether `name`'s state has DRAIN (looked for before `Reason=`: a reason may say "drain" itself)."""
        return "DRAIN" in self.show_node(name).split("Reason=")[0]

    def server_env(self) -> dict[str, str]:
        """The settings a Slurm site starts `remediate serve` with: this cluster, its `train` partition."""
        return {
            "REMEDIATE_SCHEDULERS": "slurm",
            "REMEDIATE_SLURM_CONF": str(self.conf),
            "REMEDIATE_SLURM_PARTITIONS": "train",
        }

    def node_states(self) -> dict[str, tuple[bool, str, int]]:
        """Every node's drain, reason and when the reason last changed, as sinfo --json has them (not its other
        flags: the nodes without a slurmd of their own come and go NOT_RESPONDING): equal before and after a step
        that changed nothing."""
        return {n.name: (n.drained, n.reason, n.reason_changed_at) for n in self.client().nodes()}

    def drain_by_hand(self, name: str, reason: str) -> None:
        self.run("scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def resume_all(self) -> None:
        """Every drained or down node back in service (a test's drains undone before the next test)."""
        rows = [line.split() for line in self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.splitlines()]
        out = [row[0] for row in rows if len(row) == 2 and ("drain" in row[1] or row[1].startswith("down"))]
        for name in dict.fromkeys(out):
            self.run("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)

    def sbatch(self, node: str, *, requeue: bool, comment: str | None = None, script: str = "sleep 600") -> int:
        """A batch job holding `node` (`script`, run by /bin/sh: a sleep by default), submitted as a user does,
        with `comment` (sbatch --comment) when given; its job id. Only this host's node runs jobs as a node
        does: a job sent to gpu-0x starts (this host's slurmd launches it) but never ends, as the kill goes to a
        node with no slurmd."""
        again = "--requeue" if requeue else "--no-requeue"
        commented = [f"--comment={comment}"] if comment is not None else []
        done = self.run("sbatch", "--parsable", f"--nodelist={node}", "--mem=100", "--output=/dev/null",
                        f"--chdir={self.root}", again, *commented, "--wrap", script)  # fmt: skip
        return int(done.stdout.strip().split(";")[0])

    def job_state(self, job_id: int) -> str:
        return self.run("squeue", "-h", "-j", str(job_id), "-o", "%T", check=False).stdout.strip()

    def job_field(self, job_id: int, name: str) -> str:
        """One field of `scontrol show job` (NodeList, Restarts, EligibleTime, ...); "" where it has none."""
        shown = self.run("scontrol", "-o", "show", "job", str(job_id)).stdout
        return next((item.split("=", 1)[1] for item in shown.split() if item.startswith(f"{name}=")), "")

    def cancel_jobs(self) -> None:
        """Every job cancelled and gone from the queue."""
        self.run("scancel", "--user=root")
        wait_until(lambda: self.run("squeue", "-h").stdout.strip() == "", 20, interval=0.2, message="jobs ended")

    def client(self, timeout: float | None = None) -> SlurmClient:
        """A client of this cluster; `timeout` (default: 10 s scaled) is its slurm_command_timeout."""
        return SlurmClient(conf=self.conf, bin_dir=Path("/usr/bin"), timeout=timeout or scaled(10))

    def node_cache(
        self, *, interval: float | None = None, on_command: Callable[[str], None] | None = None
    ) -> SlurmNodeCache:
        """A node cache of this cluster (one sinfo --json every `interval`, default 1 s scaled), its client calling
        `on_command` with each command's tool; stopped at the end of the test."""
        client = dataclasses.replace(self.client(), on_command=on_command)
        cache = SlurmNodeCache(client, interval=interval or scaled(1.0))
        self.caches.append(cache)
        return cache

    def stop_caches(self) -> None:
        while self.caches:
            self.caches.pop().stop()

    def _host_registered(self) -> bool:
        line = self.run("scontrol", "-o", "show", "node", self.host, check=False).stdout
        return "SlurmdStartTime=None" not in line and "State=IDLE" in line


def trap_script(signal: str, seen: Path) -> str:
    """A job script that appends a line to `seen` on each `signal` it gets and keeps running (as a Lightning job
    checkpoints on USR1): its sleeps run in the background, so the shell takes the signal at once."""
    return f"trap 'echo {signal} >> {seen}' {signal}; while true; do sleep 1 & wait $!; done"


_running: list[SlurmCluster] = []


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_running):
        cluster.stop()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    missing = missing_requirements()
    if missing:
        message = f"cannot start a Slurm cluster: no {', '.join(missing)}"
        if os.environ.get(REQUIRED_VARIABLE) == "1":
            pytest.fail(message)
        pytest.skip(message)
    cluster = SlurmCluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, its controller running, every node in service and no job when the test starts."""
    if "slurmctld" not in slurm_cluster.procs:
        slurm_cluster.start_controller()
    slurm_cluster.resume_all()
    yield slurm_cluster
    slurm_cluster.stop_caches()
    if "slurmctld" not in slurm_cluster.procs:
        slurm_cluster.start_controller()
    slurm_cluster.cancel_jobs()
    slurm_cluster.resume_all()


def xid_playbook(
    *, cooldown: str = "0s", requeue: bool = True, retries: int | None = None, timeout: str | None = None
) -> str:
    """The tests' own small Slurm playbook (a site runs the shipped ones: tests/e2e/test_slurm_shipped.py): a
    GPUXidCritical alert drains its node with the XID in the reason, then (`requeue`) sends its jobs back to the
    queue; the resolution resumes it. `retries` and `timeout`, when given, bound each firing step."""
    bounds = [f"    {key}: {value}" for key, value in (("retries", retries), ("timeout", timeout)) if value is not None]
    drain = ["  - action: slurm.drain", '    with: {note: "xid {{ labels.xid }}"}', *bounds]
    requeue_step = ["  - action: slurm.requeue", *bounds] if requeue else []
    head = ["name: xid-slurm-quarantine", "match: {alertname: GPUXidCritical}", "target: node", f"cooldown: {cooldown}"]
    lines = [*head, "steps:", *drain, *requeue_step, "on_resolved:", "  - action: slurm.resume"]
    return "\n".join(lines) + "\n"


def slurm_actions(
    cluster: SlurmCluster, partitions: tuple[str, ...] = (), cache: SlurmNodeCache | None = None
) -> dict[str, SlurmAction]:
    """One of each slurm.* action on `cluster`, sharing one node cache (`cache`, or a new one of 1 s scaled) as a
    registry's do, found as the registry finds them (a new one is in the tests without a list to extend)."""
    shared = cache or cluster.node_cache()
    kinds = [kind for kind in action_classes() if issubclass(kind, SlurmAction)]
    return {kind.name: kind(lambda: shared, SlurmOptions(partitions=partitions)) for kind in kinds}


def step_context(
    node: str,
    *,
    run_id: int = 42,
    fingerprint: str = "f00dfeed",
    labels: dict[str, str] | None = None,
    breaker: CircuitBreaker | None = None,
    memory: ActionMemory | None = None,
) -> StepContext:
    """A step of run `run_id` for a GPUXidCritical alert naming `node` in its Hostname label."""
    all_labels = {"alertname": "GPUXidCritical", "Hostname": node, **(labels or {})}
    alert = {"labels": all_labels, "alertname": all_labels["alertname"], "fingerprint": fingerprint,
             "startsAt": "2026-01-01T00:00:00Z", "status": "firing"}  # fmt: skip
    return StepContext(
        run_id=run_id,
        step_index=0,
        playbook="gpu-xid-quarantine",
        target=node,
        alert=alert_ref(alert),
        breaker=breaker,
        memory=memory if memory is not None else InMemoryMemory(),
    )
