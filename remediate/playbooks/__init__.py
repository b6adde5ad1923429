"""Playbooks: what an operator writes (YAML) and the server matches alerts against.

playbook.py (a playbook file -> Playbook, the PlaybookSet and its matching, steps checked against each
action's declared params), repeat.py (a ladder's `repeat_offender` key as loaded).

May import: intake (matchers), templating, rollout, durations, errors, and the action registry's interface
(actions.base) to check params; knows nothing of execution, storage or HTTP (the `intake` contract).
"""
