"""The README's examples run as written: every fenced block of README.md is run or checked here.

- ```sh blocks: each command (a line; `\\` joins lines) runs in a copy of the tree, in order, as a user's shell
  runs it (`bash -c`: the lines use `$(...)` and quotes), with the real CLI, real files and real processes.
  `scripts/serve` starts the server the README's later commands talk to; its start-up block must be the
  ```text block. Each command's exit code and what the README says it shows are asserted (`EXPECTED`):
  every quoted output is taken from the README's own text, so the prose and the test cannot drift apart.
- ```yaml blocks: the AlertManager receiver passes `amtool check-config` and agrees with the shipped
  alertmanager/alertmanager.yml; the playbook passes `remediate playbooks validate`.
- The bare ``` block (the tests' layout): every folder it names exists.

A block of another kind, a command with no expectation, or an expectation no command needs fails the test:
a new example is run or listed in `NOT_RUN` with the reason. Code inline in the prose is not extracted; the two
inline commands a user would type on day one that cannot run here are in `INLINE_NOT_RUN`, with the reason.

Two things differ from a user's terminal, both for running beside other tests: the server binds a free port
(the README's 127.0.0.1:9095 is replaced in every command), and `.venv` is made here to run this checkout
(scripts/serve's pip install is skipped, as in tests/e2e/test_serve_start.py).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support.processes import log_tail
from tests.support.realsystems import AlertManager, free_port
from tests.support.serve_script import with_venv
from tests.support.server import STOP_GRACE, WAIT
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_PORT = "127.0.0.1:9095"
COMMAND_TIMEOUT = scaled(60.0)  # one CLI command on an idle machine takes ~1 s
READY = 30.0  # seconds on an idle machine for scripts/serve to answer /readyz (wait_until scales it)

# Commands of the README that are not run here, and why. Keep it short: whatever can run here must run.
NOT_RUN = {
    "scripts/test": "runs the whole suite this test belongs to (~7 min); CI and every engineer run it",
}
# Commands written inline in the README's prose (not fenced) that need what a test machine has not got.
INLINE_NOT_RUN = {
    "helm install remediate helm/remediate": "needs a Kubernetes cluster; tests/e2e/test_chart.py renders the "
    "chart with the real helm and checks what it makes",
    "prometheus-alertmanager --config.file=": "binds AlertManager's fixed ports 9093/9094; the receiver block is "
    "checked here with amtool, and tests/e2e/test_alertmanager*.py run a real AlertManager sending to remediate",
}


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: its info string (`sh`, `yaml`, ...), text and the fence's line."""

    lang: str
    text: str
    line: int


@dataclass(frozen=True)
class Expect:
    """What one README command must do: `match` picks the command (a substring of exactly one); `shows` are
    outputs the README quotes (`…` stands for anything), found in its text and then in the output; `check`
    asserts what the README says in words (a file written, 8 GPUs listed). `eventually`: what it shows comes
    from the executor, which runs after the webhook's answer: the command is run again, as a user would,
    until it shows it (within `WAIT`)."""

    match: str
    exit_code: int = 0
    shows: tuple[str, ...] = ()
    check: Callable[[Path, str], None] | None = None
    eventually: bool = False


def _eight_gpus(tree: Path, output: str) -> None:
    rows = [line for line in output.splitlines() if re.match(r"\d+\s+GPU-", line)]
    assert len(rows) == 8, output


def _eight_simulated_gpus_written(tree: Path, output: str) -> None:
    devices = yaml.safe_load((tree / "gpus.yaml").read_text())["devices"]
    assert len(devices) == 8 and all("H100" in device["name"] for device in devices), devices


EXPECTED = (
    Expect("playbooks validate", shows=("11 playbooks valid",)),
    Expect("gpu simulate init gpus.yaml", check=_eight_simulated_gpus_written),
    Expect("gpu status --gpu-backend simulated", check=_eight_gpus),
    Expect(
        "dry-run --gpu-backend simulated",
        shows=('"change": "700 W -> 560 W"', "would run: yes"),
    ),
    Expect(
        "dry-run --alertname GPUXidCritical",
        exit_code=1,
        shows=(
            "would run: no (playbook gpu-xid-quarantine: step 1 cordon: plan failed: KubeConfigError: "
            "no Kubernetes cluster configured: set kubeconfig / REMEDIATE_KUBECONFIG …)",
        ),
    ),
    Expect("/webhook", shows=('{"alerts":1,"decisions":{"accepted":1},"notification_id":1,"runs":[1]}',)),
    Expect("/history?", shows=('"alertname":"GPUTemperatureHigh","decision":"accepted"',)),
    Expect("remediate history", shows=("gpu-overheat",)),
    Expect(
        "remediate show 1",
        shows=("node 'node-a' is not this host … and no agents are configured",),
        eventually=True,
    ),
)


def fenced_blocks(markdown: str) -> list[Block]:
    """The fenced blocks of a Markdown text (a fence may be indented, as in a list item)."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"^(\s*)```(\S*)\s*$", lines[index])
        index += 1
        if not opening:
            continue
        start, body = index, []
        while not re.match(r"^\s*```\s*$", lines[index]):
            body.append(lines[index].removeprefix(opening.group(1)))
            index += 1
        blocks.append(Block(opening.group(2), "\n".join(body), start))
        index += 1
    return blocks


def commands(block: Block) -> list[str]:
    """The commands of a ```sh block: one a line, a line ending in `\\` continued on the next."""
    joined = re.sub(r"\\\n\s*", "", block.text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def readme_text() -> str:
    """The README with each line break and its indentation read as one space, as Markdown renders it."""
    return re.sub(r"\s*\n\s*", " ", README.read_text(encoding="utf-8"))


def pattern(shown: str) -> re.Pattern[str]:
    """A quoted output as a regex: `…` (something the README leaves out) matches anything on one line."""
    return re.compile(".*?".join(re.escape(part) for part in shown.split("…")))


def expectation(command: str) -> Expect:
    found = [expect for expect in EXPECTED if expect.match in command]
    assert len(found) == 1, f"README command {command!r}: {len(found)} expectations match it, not 1"
    return found[0]


def blocks_of(lang: str) -> list[Block]:
    return [block for block in fenced_blocks(README.read_text(encoding="utf-8")) if block.lang == lang]


def test_every_fenced_block_of_the_readme_is_one_this_test_runs_or_checks() -> None:
    kinds = {"sh", "text", "yaml", ""}
    for block in fenced_blocks(README.read_text(encoding="utf-8")):
        assert block.lang in kinds, (
            f"README.md line {block.line}: a ```{block.lang} block this test does not know: run or check it here"
        )
    every = [command for block in blocks_of("sh") for command in commands(block)]
    run = [command for command in every if command.split()[0] not in NOT_RUN and "scripts/serve" not in command]
    for command in run:
        expectation(command)
    for expect in EXPECTED:
        assert any(expect.match in command for command in run), f"no README command matches {expect.match!r}"
    for shown in (shown for expect in EXPECTED for shown in expect.shows):
        assert f"`{shown}`" in readme_text(), f"the README no longer says its output shows `{shown}`"
    for named in (*NOT_RUN, *INLINE_NOT_RUN):
        assert named in README.read_text(encoding="utf-8"), f"{named!r} is listed as not run but the README lacks it"


# ---------------------------------------------------------------------------------------------- the sh blocks


def copy_of_the_tree(tree: Path) -> None:
    """The repository's files (tracked and new, as on disk) and a .venv that runs them, without pip."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode & 0o777)
    with_venv(tree)


def user_environment(tree: Path) -> dict[str, str]:
    """A shell of a user who set nothing: no REMEDIATE_*, no cluster around; this copy's code imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(PYTHONPATH=str(tree), PYTHONUNBUFFERED="1", KUBERNETES_SERVICE_HOST="")
    return env


@dataclass(frozen=True)
class Served:
    """scripts/serve running in a copy of the tree: where, on which address, and its output."""

    tree: Path
    address: str
    log_path: Path


@contextlib.contextmanager
def serving(tree: Path, *args: str) -> Iterator[Served]:
    """`scripts/serve ARGS` started in `tree` on a free port, until /readyz answers; stopped on exit."""
    address = f"127.0.0.1:{free_port()}"
    log_path = tree.parent / f"{tree.name}-serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            ["scripts/serve", *args, "--bind", address],
            cwd=tree,
            env=user_environment(tree),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            assert proc.poll() is None, f"scripts/serve exited {proc.returncode}:\n{log_tail(log_path)}"
            try:
                return requests.get(f"http://{address}/readyz", timeout=scaled(2)).status_code == 200
            except requests.ConnectionError:
                return False

        wait_until(ready, READY, message=f"scripts/serve ready\n{log_tail(log_path)}")
        yield Served(tree, address, log_path)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """The README's `scripts/serve` line, run in a copy of the tree: each test its own (the README's answers
    name notification and run 1)."""
    (serve,) = [c for block in blocks_of("sh") for c in commands(block) if c.startswith("scripts/serve")]
    assert serve.split("#")[0].split() == ["scripts/serve"], serve  # no arguments but the port added here
    tree = tmp_path / "tree"
    copy_of_the_tree(tree)
    with serving(tree) as server:
        yield server


def run_line(command: str, tree: Path, address: str) -> subprocess.CompletedProcess[str]:
    """One README command, run as a user's shell runs it (a README line is a shell line: `$(...)`, quotes)."""
    return subprocess.run(
        ["bash", "-c", command.replace(README_PORT, address)],
        cwd=tree,
        env=user_environment(tree),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def shows_all(command: str, tree: Path, address: str, expect: Expect) -> bool:
    """Whether the command, run now, shows everything the README says it shows."""
    done = run_line(command, tree, address)
    return all(pattern(quoted).search(done.stdout + done.stderr) for quoted in expect.shows)


def start_up_block(log: str) -> list[str]:
    """The lines remediate serve logged at start (from `remediate listening on`), without time and logger."""
    prefix = "INFO remediate.serve: "
    lines = [line.partition(prefix)[2] for line in log.splitlines() if prefix in line]
    starts = [i for i, line in enumerate(lines) if line.startswith("remediate listening on ")]
    assert len(starts) == 1, log
    return lines[starts[0] :]


def test_the_readme_sh_blocks_run_as_written_against_the_server_scripts_serve_started(served: Served) -> None:
    tree, address, log_path = served.tree, served.address, served.log_path

    # scripts/serve: shadow mode, how to switch, and the ```text block as its start-up block.
    log = log_path.read_text()
    assert "to act: scripts/serve --mode enforce" in log, log
    (shown,) = blocks_of("text")
    expected_lines = shown.text.replace(README_PORT, address).splitlines()
    logged = start_up_block(log)[: len(expected_lines)]
    for want, got in zip(expected_lines, logged, strict=True):
        assert pattern(want).fullmatch(got), f"README shows {want!r}, scripts/serve logged {got!r}"

    ran = []
    for block in blocks_of("sh"):
        for command in commands(block):
            if command.split()[0] in NOT_RUN or command.startswith("scripts/serve"):
                continue
            expect = expectation(command)
            if expect.eventually:
                wait_until(partial(shows_all, command, tree, address, expect), WAIT, interval=0.5)
            done = run_line(command, tree, address)
            output = done.stdout + done.stderr
            assert done.returncode == expect.exit_code, f"{command}\nexited {done.returncode}:\n{output}"
            for quoted in expect.shows:
                assert pattern(quoted).search(output), f"{command}\ndoes not show {quoted!r}:\n{output}"
            if expect.check:
                expect.check(tree, output)
            ran.append(command)
    assert len(ran) == len(EXPECTED)


# -------------------------------------------------------------------------------- the yaml and layout blocks


def yaml_block(key: str) -> dict[str, Any]:
    (found,) = [data for block in blocks_of("yaml") if key in (data := yaml.safe_load(block.text))]
    return found


def test_every_yaml_block_is_an_alertmanager_receiver_or_a_playbook() -> None:
    for block in blocks_of("yaml"):
        data = yaml.safe_load(block.text)
        assert "receivers" in data or "steps" in data, f"README.md line {block.line}: which file is this block?"


def test_the_readme_alertmanager_receiver_passes_amtool_and_matches_the_shipped_one(tmp_path: Path) -> None:
    receiver = yaml_block("receivers")
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump({"route": {"receiver": "remediate"}, **receiver}))
    checked = subprocess.run(["amtool", "check-config", str(config)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    shipped = yaml.safe_load((ROOT / "alertmanager/alertmanager.yml").read_text())
    (theirs,) = [r["webhook_configs"][0] for r in shipped["receivers"] if r["name"] == "remediate"]
    (ours,) = [r["webhook_configs"][0] for r in receiver["receivers"] if r["name"] == "remediate"]
    assert ours["url"] == theirs["url"] == f"http://{README_PORT}/webhook"
    assert ours["send_resolved"] is theirs["send_resolved"] is True
    assert ours["http_config"]["authorization"]["type"] == theirs["http_config"]["authorization"]["type"] == "Bearer"


def test_the_readme_playbook_passes_remediate_playbooks_validate(tmp_path: Path) -> None:
    playbook = yaml_block("steps")
    directory = tmp_path / "playbooks"
    directory.mkdir()
    (directory / "example.yaml").write_text(yaml.safe_dump(playbook))
    done = subprocess.run(
        [sys.executable, "-m", "remediate", "playbooks", "validate", str(directory)],
        env=user_environment(ROOT),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 playbooks valid" in done.stdout or "1 playbook valid" in done.stdout, done.stdout


def test_the_folders_of_the_readme_tests_layout_exist() -> None:
    (layout,) = blocks_of("")
    named = [line.split()[0] for line in layout.text.splitlines() if line[:1].strip()]  # not a continuation
    assert named and all(name.startswith("tests/") for name in named), named
    for name in named:
        assert list(ROOT.glob(name)), f"README names {name}, which is not there"


def test_the_readme_alertmanager_receiver_delivers_with_the_token_file_scripts_serve_wrote(
    served: Served, tmp_path: Path
) -> None:
    """A real AlertManager with the README's receiver block: its URL and `/path/to/remediate.token` made the
    served tree's, and a route that sends at once. The alert matches no playbook and is recorded as unmatched:
    remediate took AlertManager's token."""
    receivers = copy.deepcopy(yaml_block("receivers"))
    (webhook,) = [r["webhook_configs"][0] for r in receivers["receivers"] if r["name"] == "remediate"]
    authorization = webhook["http_config"]["authorization"]
    assert Path(authorization["credentials_file"]).name == "remediate.token"  # the file scripts/serve writes
    authorization["credentials_file"] = str(served.tree / "remediate.token")
    webhook["url"] = webhook["url"].replace(README_PORT, served.address)

    class ReadmeAlertManager(AlertManager):
        def config(self) -> dict[str, Any]:
            route = {"receiver": "remediate", "group_by": ["alertname"], "group_wait": "1s", "group_interval": "1s"}
            return {"route": route, **receivers}

    operator = (served.tree / "remediate.operator-token").read_text().strip()

    def recorded() -> list[dict[str, Any]]:
        response = requests.get(
            f"http://{served.address}/history",
            params={"alertname": "ReadmeReceiverCheck"},
            headers={"Authorization": f"Bearer {operator}"},
            timeout=scaled(5),
        )
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()["entries"]
        return entries

    with ReadmeAlertManager(tmp_path / "alertmanager", webhook["url"], token=None) as alertmanager:
        alertmanager.fire({"alertname": "ReadmeReceiverCheck", "Hostname": "node-a"})
        (entry,) = wait_until(recorded, WAIT, message=f"the alert in /history\n{alertmanager.log_tail()}")
    assert entry["decision"] == "unmatched", entry


def test_the_readme_way_to_let_playbooks_act_starts_in_enforce_mode(tmp_path: Path) -> None:
    """The README's switch out of shadow mode, `scripts/serve --mode enforce`, run as written."""
    assert "`scripts/serve --mode enforce`" in readme_text()
    tree = tmp_path / "tree"
    copy_of_the_tree(tree)
    with serving(tree, "--mode", "enforce") as server:
        log = server.log_path.read_text()
    mode = [line for line in start_up_block(log) if line.startswith("mode: ")]
    assert mode and mode[0].startswith("mode: enforce"), log
    assert "shadow mode" not in log, log
