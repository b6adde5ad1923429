"""The shipped gpu-overheat ladder's messages say what happened before them: its rung 2 also runs for a GPU
hot again within 30 minutes of cooling, when rung 1's power cap was already restored, so its log must not
say "still hot after its power cap" as if a cap were in force."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.integration.test_intake import DEFAULT_MW, SHIPPED, _gpu_server, _hot
from tests.support.http import Server, notification


def test_rung_two_of_a_gpu_hot_again_after_its_cap_was_restored_does_not_say_the_cap_holds(
    make_server: Callable[..., Server], tmp_path: Path
) -> None:
    # The shipped ladder, its 5m cooldown cut so that the re-fire runs now (the ladder counts real time).
    overheat = (SHIPPED / "gpu-overheat.yaml").read_text(encoding="utf-8").replace("cooldown: 5m", "cooldown: 0s")
    server, gpus = _gpu_server(make_server, tmp_path, {"gpu-overheat.yaml": overheat})
    uuid = gpus.devices()[0].uuid

    server.webhook(notification(_hot("dd01", uuid, "2026-11-21T05:40:14Z")))
    server.drain()
    assert gpus.device(uuid).power_limit_mw == 560_000  # capped at 80%
    server.webhook(notification({**_hot("dd01", uuid, "2026-11-21T05:40:14Z"), "status": "resolved"}))
    server.drain()
    assert gpus.device(uuid).power_limit_mw == DEFAULT_MW  # cooled: the cap is gone
    (again,) = server.webhook(notification(_hot("dd01", uuid, "2026-11-21T05:55:00Z"))).get_json()["runs"]
    server.drain()

    run = server.get(f"/runs/{again}").get_json()
    assert (run["status"], run["rung"]) == ("succeeded", 2)
    assert gpus.device(uuid).power_limit_mw == DEFAULT_MW  # rung 2 locks clocks, it caps nothing
    logged = " ".join(next(s for s in run["steps"] if s["name"] == "log-locked")["result"]["logged"].split())
    assert "after its power cap" not in logged
    assert "is still hot, or hot again, after rung 1 (cap-power) ran: graphics clock locked" in logged
    assert "the power cap holds only if that rung's run succeeded and the GPU has not cooled since" in logged
