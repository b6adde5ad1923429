"""The log lines of every remediate process: their one set-up, lines alert data cannot forge, the audit events.

setup.py configures logging once per process (serve, agent, CLI: log_format text|json, log_level, the request
id); safe.py escapes control characters so that a label value cannot end a line and start a forged one;
audit.py names the audit events (logger `remediate.audit`, docs/logging.md lists each with its fields).

May import: nothing else of remediate (every stage logs, so this knows none of them).
"""
