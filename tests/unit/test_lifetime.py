"""remediate.serve.lifetime on real forked processes: a temporary dir is removed only by its maker, however a child
forked inside its block ends; a child asks to die with its parent."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from remediate.serve.lifetime import die_with_parent, exit_code, owned_tempdir
from tests.support.waiting import wait_until


def test_a_child_that_exits_through_the_block_leaves_the_dir_to_its_maker_who_removes_it() -> None:
    try:
        with owned_tempdir("remediate-test-") as path:
            (path / "counter_1.db").write_bytes(b"x")
            pid = os.fork()
            if pid == 0:  # the child unwinds through the block, as gunicorn's worker did with sys.exit
                raise SystemExit(0)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0
            assert (path / "counter_1.db").exists(), "the child removed its parent's dir"
    except SystemExit:  # only the child gets here, past the block: it must not go on into pytest
        os._exit(0)
    assert not path.exists()


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), (-1, 255), ("boom", 1)])
def test_the_exit_code_is_the_one_the_interpreter_would_exit_with(code: object, status: int) -> None:
    assert exit_code(SystemExit(code)) == status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_child_asked_to_die_with_its_parent_is_killed_when_the_parent_is(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    parent = os.fork()
    if parent == 0:  # the middle process: forks the grandchild, then waits to be killed
        child = os.fork()
        if child == 0:
            die_with_parent(os.getppid(), signal.SIGKILL)
            pidfile.write_text(str(os.getpid()))
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
        os._exit(0)
    grandchild = wait_until(lambda: pidfile.exists() and pidfile.read_text() and int(pidfile.read_text()), 10)
    os.kill(parent, signal.SIGKILL)
    os.waitpid(parent, 0)

    def gone() -> bool:
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        return state == "Z"  # dead, waiting for init to reap it

    wait_until(gone, 2, interval=0.01, message="the grandchild outlived its parent")
