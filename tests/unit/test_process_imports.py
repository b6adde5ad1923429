"""What remediate's processes import until they send something (the agent's idle RSS, the server's idle PSS).

`remediate agent` builds the same actions as the server, and the master of `remediate serve` imports them all:
a module the actions import at their top is resident in every agent and in every server. Senders import
requests when they first send (remediate.outbound.lazyhttp: ~4.7 MiB), and the training package names its job-side
classes lazily. Each case runs in a fresh interpreter, as the process does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from remediate.outbound.lazyhttp import SessionSlot
from tests.support.server import write_playbook

PLAYBOOK = """\
name: noted
match: {alertname: [Noted]}
steps:
  - action: notify.webhook
    with: {url: "http://127.0.0.1:9/hook"}
"""

WATCHED = ("requests", "remediate.training.client")


def _imported_after(code: str, tmp_path: Path) -> set[str]:
    """The WATCHED modules loaded once `code` ran in a fresh interpreter with a server's settings in its env."""
    write_playbook(tmp_path / "playbooks", "noted", PLAYBOOK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    env.update(
        {
            "REMEDIATE_TOKEN": "t" * 32,
            "REMEDIATE_PLAYBOOKS": str(tmp_path / "playbooks"),
            "REMEDIATE_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        }
    )
    script = (
        "import json, sys\n"
        "from remediate.config.settings import load_settings\n"
        "settings = load_settings(config_file=None, overrides={})\n"
        f"{code}\n"
        f"print(json.dumps(sorted(m for m in {list(WATCHED)!r} if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_server_and_its_http_workers_load_no_requests_until_a_step_sends(tmp_path: Path) -> None:
    code = (
        "import remediate.server\n"  # what the master imports before forking
        "from remediate.serve.launcher import _server_app\n"
        "app = _server_app(settings, None)\n"
        "assert app.test_client().get('/healthz').status_code == 200"
    )
    assert "requests" not in _imported_after(code, tmp_path)


def test_the_server_side_of_the_training_protocol_loads_no_job_side_class(tmp_path: Path) -> None:
    code = "import remediate.actions.training, remediate.actions.training_command, remediate.training.protocol"
    assert "remediate.training.client" not in _imported_after(code, tmp_path)
    code = "from remediate.training import TrainingControl, TorchCheckpoints\nassert TrainingControl.__name__"
    assert "remediate.training.client" in _imported_after(code, tmp_path)  # named: loaded


def test_the_training_package_names_each_lazy_class_and_refuses_others() -> None:
    import remediate.training
    from remediate.training.client import TrainingControl

    assert remediate.training.TrainingControl is TrainingControl
    assert {"TrainingControl", "TorchCheckpoints", "ControlOptions"} <= set(dir(remediate.training))
    assert "Handler" not in dir(remediate.training)  # moved out of the job's namespace (still resolved, warned)
    assert set(remediate.training.__all__) <= set(dir(remediate.training))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = remediate.training.Nope


class Sender:
    session = SessionSlot()

    def __init__(self, session: requests.Session | None = None) -> None:
        self.session = session


def test_a_session_slot_keeps_the_session_given() -> None:
    given = requests.Session()
    assert Sender(given).session is given


def test_a_session_slot_makes_one_session_per_sender_on_first_read() -> None:
    first, second = Sender(), Sender()
    assert "_session_slot" in vars(first) and vars(first)["_session_slot"] is None  # nothing made yet
    made = first.session
    assert isinstance(made, requests.Session)
    assert first.session is made  # kept
    assert second.session is not made  # each sender its own, as each made one in its constructor before
