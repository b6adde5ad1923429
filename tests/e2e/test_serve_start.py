"""What a start of `remediate serve` says: one short block, printed once, naming where it listens
and its UI, the mode and what it means, the GPU backend, the playbooks loaded and the token files (never a
token); and scripts/serve, run for real, starts in shadow mode like the chart."""

from __future__ import annotations

from pathlib import Path

from tests.support.realsystems import free_port
from tests.support.serve_script import serve_tree, start_serve_script
from tests.support.server import TOKEN, WAIT, RemediateServer, write_playbook
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
name: logged
match: {alertname: [Logged]}
steps:
  - action: log
    with: {message: "seen {{ labels.alertname }}"}
"""
BLOCK_STARTS = (
    "remediate listening on ",
    "mode: ",
    "GPU backend: ",
    "playbooks: ",
    "store: ",
    "cluster (k8s.* steps): ",
    "token files: ",
)


def block_lines(log: str) -> list[str]:
    """The start-up block's lines of a log, without their time and logger."""
    found = []
    for line in log.splitlines():
        _, _, message = line.partition("INFO remediate.serve: ")
        if message.startswith(BLOCK_STARTS):
            found.append(message)
    return found


def test_a_start_prints_one_block_with_urls_mode_backend_playbooks_and_token_files(tmp_path: Path) -> None:
    write_playbook(tmp_path / "playbooks", "logged", PLAYBOOK)
    operator_file = tmp_path / "operator.token"
    operator_token = "operator-token-never-printed-0123"
    operator_file.write_text(operator_token)
    operator_file.chmod(0o600)
    server = RemediateServer(
        tmp_path / "server",
        tmp_path / "playbooks",
        workers=1,
        env={"REMEDIATE_OPERATOR_TOKEN_FILE": str(operator_file), "KUBERNETES_SERVICE_HOST": ""},
    ).start()
    server.stop()
    log = server.log_path.read_text()
    lines = block_lines(log)
    assert [line.split(":")[0] for line in lines] == [
        "remediate listening on http",
        "mode",
        "GPU backend",
        "playbooks",
        "store",
        "cluster (k8s.* steps)",
        "token files",
    ], log  # each once, in this order
    assert lines[0] == f"remediate listening on {server.url}; UI: {server.url}/ui/"
    assert lines[1].startswith("mode: enforce (playbooks act")
    assert lines[2] == "GPU backend: nvml"
    assert lines[3] == f"playbooks: 1 from {tmp_path / 'playbooks'} (logged)"
    assert lines[5].startswith("cluster (k8s.* steps): none (set kubeconfig / REMEDIATE_KUBECONFIG")
    assert f"operator: {operator_file}" in lines[6]
    assert "token: given in the environment or config (no file)" in lines[6]
    assert TOKEN not in log and operator_token not in log


def test_scripts_serve_starts_in_dry_run_and_says_how_to_switch(tmp_path: Path) -> None:
    """The real script, in a copy of the tree whose .venv runs this checkout's remediate (no install)."""
    tree = serve_tree(tmp_path / "tree")
    write_playbook(tree / "playbooks", "logged", PLAYBOOK)
    url = f"127.0.0.1:{free_port()}"
    args = ("--bind", url, "--workers", "1", "--database-url", f"sqlite:///{tmp_path / 'r.db'}")
    serve = start_serve_script(tree, tmp_path / "serve.log", *args)
    try:
        wait_until(lambda: "token files: " in serve.log() or serve.process.poll() is not None, WAIT)
    finally:
        serve.stop()
    log = serve.log()
    assert "shadow mode (dry-run): playbooks only plan; to act: scripts/serve --mode enforce" in log, log
    lines = block_lines(log)
    assert lines[1].startswith("mode: dry-run (shadow mode: every run only plans"), log
    assert f"token: {tree / 'remediate.token'}" in lines[6]
    assert f"operator: {tree / 'remediate.operator-token'}" in lines[6]
