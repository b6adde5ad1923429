"""Rehearsal: what a playbook or a change would do, judged by the real engine, with nothing run.

dryrun.py (`remediate dry-run`: one alert through the real engine into a scratch store), replay.py
(`remediate replay`: stored notifications judged again and compared with what was decided),
replay_steps.py (what each step of a run decided the same way would do differently).

May import what the server's ingest does (services, judging, playbooks, store, actions, the breaker),
plus dbcopy and source_guard to read another database as data. Only the command line imports it.
"""
