"""Ingest and judge: one notification's alerts matched to playbooks, judged stage by stage, recorded.

engine.py (Engine: evaluate -> judge -> record in one transaction), stages.py (the named stages over one
(alert, playbook) pair), guards.py (the guard stages, pure), waves.py (a node's rollout wave), ladder.py
(escalation ladders: the rung a firing alert gets).

May import: intake, playbooks, templating, runs, the store, actions (to validate a step's params), the
breaker, kube (waves), config. Never the executor (the `engine-executor` contract), HTTP or serve.
"""
