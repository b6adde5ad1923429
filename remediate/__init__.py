"""remediate: turn Prometheus AlertManager alerts into safe, audited fixes on GPU training clusters.

The flow, module by module: alerts (parse the webhook) -> playbooks (match, render)
-> guards (decide) -> engine (commit runs) -> executor (run steps) -> actions.
"""

__version__ = "0.1.0"
