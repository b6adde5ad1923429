"""`python -m remediate.burnin --backend gloo --ranks 2 --megabytes 16 --iters 20 --seconds 300`: the benchmark of
remediate.burnin.allreduce on this node, one JSON line (a Measurement) on stdout; exit status 0 when it ran
(whatever the figure: the judging is the action's), 1 when a rank failed or it ran past `--seconds` (its ranks
ended), 2 for bad arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from remediate.burnin.allreduce import BurninFailed, BurninSpec, measure
from remediate.burnin.command import BACKENDS, LIMITS


def _bounded(name: str) -> Callable[[str], int]:
    low, high = LIMITS[name]

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} must be between {low} and {high}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remediate.burnin", description=__doc__)
    parser.add_argument("--backend", choices=BACKENDS, default="gloo")
    parser.add_argument("--ranks", type=_bounded("ranks"), default=2)
    parser.add_argument("--megabytes", type=_bounded("megabytes"), default=16)
    parser.add_argument("--iters", type=_bounded("iters"), default=20)
    parser.add_argument("--seconds", type=_bounded("seconds"), default=300)
    args = parser.parse_args(argv)
    try:
        measured = measure(BurninSpec(args.backend, args.ranks, args.megabytes, args.iters, seconds=args.seconds))
    except BurninFailed as exc:
        print(f"burn-in failed: {exc}", file=sys.stderr)
        return 1
    print(measured.to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
