"""How a job asks slurm.requeue for a signal in its comment, and which signals remediate may send."""

from __future__ import annotations

import pytest

from remediate.slurm.signals import JOB_SIGNALS, SignalAsk, check_signal, comment_signal


@pytest.mark.parametrize(
    ("comment", "ask"),
    [
        ("", None),
        ("exp42 lr=3e-4", None),
        ("remediate-signal=USR1", SignalAsk("USR1")),
        ("exp42 remediate-signal=USR2", SignalAsk("USR2")),
        ("exp42,remediate-signal=usr1,owner=ana", SignalAsk("USR1")),
        ("REMEDIATE-SIGNAL=SIGUSR1", SignalAsk("USR1")),
        ("remediate-signal=none", SignalAsk(None)),
        ("remediate-signal=USR1 remediate-signal=SIGUSR1", SignalAsk("USR1")),  # the same, twice
        ("remediate-signals=USR1 xremediate-signal=USR1", None),  # another key
    ],
)
def test_the_comment_token_is_read_wherever_it_is_in_the_comment(comment: str, ask: SignalAsk | None) -> None:
    assert comment_signal(comment) == ask


@pytest.mark.parametrize(
    ("comment", "words"),
    [
        ("remediate-signal=KILL", "remediate-signal=KILL, not one of USR1"),
        ("remediate-signal=", "remediate-signal=, not one of"),
        ("remediate-signal=USR1;rm", "remediate-signal=USR1;RM, not one of"),
        ("remediate-signal=USR1 remediate-signal=none", "asks remediate-signal=USR1 and remediate-signal=NONE"),
    ],
)
def test_a_token_that_cannot_be_honoured_asks_nothing_and_says_why(comment: str, words: str) -> None:
    ask = comment_signal(comment)
    assert ask is not None and ask.signal is None and ask.problem is not None and words in ask.problem


def test_only_signals_a_job_can_catch_and_live_are_allowed() -> None:
    assert all(check_signal(name) is None for name in JOB_SIGNALS)
    for name in ("KILL", "STOP", "QUIT", "SEGV", "usr1", "SIGUSR1", "10", "", None, 10):
        assert check_signal(name) is not None, name
