"""Playbooks: what an operator writes (YAML) and the server matches alerts against.

model.py (Playbook, its rungs, steps and target; PlaybookSet and its matching: pure functions of an Alert),
loading.py (a playbook file -> Playbook, with errors that name file, playbook and field; steps checked against
each action's declared params), repeat.py (a ladder's `repeat_offender` key as loaded).

May import: intake (matchers), config (rollout, durations), errors; loading.py also the action registry's
interface and template sandbox (actions.base, actions.templating) to check steps; nothing of execution, storage
or HTTP (the `intake` contract). The set a running server holds, and reloads, is remediate.live's.
"""
