"""`remediate doctor`: does everything remediate's fixes depend on work? Each check answers OK, WARN or FAIL with
what it saw and the fix in one line (model.Check); the worst decides the exit code (0, 1, 2).

One module per check family, none of them HTTP-served: series (Prometheus holds every series the rules and the
check.prometheus queries read, fresh; promql reads the expressions, dcgm names the exporter generation), routing
(AlertManager routes the playbooks' alerts to this server with the repeat_interval the ladders need), sinks
(each answers a HEAD), cluster (Kubernetes permissions, Slurm's controller and user), tokens (set and readable).
run.py runs them all for the CLI (remediate/cli/doctor.py) and GET /doctor (remediate/server/health.py).

May import: playbooks, actions (a sink's headers file), config, kube, slurm, intake's matchers, errors.
"""

from __future__ import annotations

from remediate.doctor.model import EXIT_CODES, Check, Status, exit_code, report_json, worst
from remediate.doctor.run import Inputs, run_checks

__all__ = ["EXIT_CODES", "Check", "Inputs", "Status", "exit_code", "report_json", "run_checks", "worst"]
