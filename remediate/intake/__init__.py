"""Intake: what arrives from AlertManager, as values the rest of the server judges.

alerts.py (the v4 webhook payload -> Notification/Alert, strict), matchers.py (label matchers, as
playbooks and ladders write them), alertref.py (the alert as a step sees it, on StepContext.alert: the one
intake module actions import).

May import: errors only. Knows nothing of execution, storage or HTTP (the `intake` contract).
"""
