"""The deployed ``remediate agent`` as a process (the agent idles in <= 40 MB of RSS).

It is one process that serves its few routes on the standard library's HTTP server and never loads Flask,
werkzeug, gunicorn, SQLAlchemy, the server's store, the Kubernetes client or requests (it sends nothing),
also after a step that writes its state file: each of these would come back as megabytes of every agent on
every node. What it imported is read from the real process (``PYTHONPROFILEIMPORTTIME``: the interpreter
lists each import on stderr, into the agent's log).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import pytest
import requests

from remediate.agentwire.auth import sign
from tests.support.processes import child_pids
from tests.support.server import NodeAgent, agent_credential
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.MULTILINE)


def test_the_agent_is_one_process_that_loads_no_web_framework_sqlalchemy_store_or_kubernetes(tmp_path: Path) -> None:
    agent = NodeAgent(tmp_path / "node-a", "node-a", env={"PYTHONPROFILEIMPORTTIME": "1"}).start()
    try:
        body = json.dumps(
            {
                "action": "gpu.set_power_limit",
                "params": {"gpu": "0", "watts": 560},
                "context": {
                    "run_id": 7,
                    "step_index": 0,
                    "playbook": "p",
                    "target": "node-a",
                    "alert": {},
                    "timeout": 10,
                },
            }
        ).encode()
        path = "/v1/steps/execute"
        answer = requests.post(
            agent.url + path,
            data=body,
            headers={
                "Content-Type": "application/json",
                "Authorization": sign(agent_credential("node-a"), "node-a", "POST", path, body),
            },
            timeout=scaled(10),
        )
        assert answer.status_code == 200, answer.text
        assert agent.limits()[0] == 560_000
        # The limit it replaced is in its state file (what a restore puts back), written without SQLAlchemy.
        with sqlite3.connect(tmp_path / "node-a" / "state" / "agent.db") as conn:
            assert [run for (run,) in conn.execute("SELECT run_id FROM action_memory")] == [7]

        assert child_pids(agent.pid) == set()  # the process kubelet starts serves the requests itself
        imported = set(_IMPORTED.findall(agent.log_path.read_text()))
        assert {"http.server", "remediate.agent.service", "remediate.agent.state"} <= imported  # the list is read
        heavy = ("flask", "werkzeug", "gunicorn", "sqlalchemy", "kubernetes", "requests")
        assert not {m for m in imported if m.split(".")[0] in heavy}
        assert not {m for m in imported if m.startswith(("remediate.store", "remediate.server"))}

        os.kill(agent.pid, signal.SIGHUP)  # a closed terminal: nothing to reload, it serves on
        time.sleep(0.5)  # a SIGHUP at its default would have ended it at once; nothing to wait for otherwise
        assert agent.running and requests.get(f"{agent.url}/readyz", timeout=scaled(5)).status_code == 200

        started = time.monotonic()
        os.kill(agent.pid, signal.SIGTERM)  # a graceful stop, as kubelet's
        wait_until(lambda: not agent.running, 10, message="the agent exited")
        assert time.monotonic() - started < 5
        assert "agent stopped (SIGTERM): no request in flight" in agent.log_tail()
    finally:
        agent.stop()
