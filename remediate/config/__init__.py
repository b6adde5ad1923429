"""The settings of every remediate process: what they are, where each comes from, what their values mean.

settings.py declares every setting (key, `REMEDIATE_*` variable, flag, default, docstring: docs/settings.md is
generated from it) in nested sections, each action getting only its own; values.py holds the value types and
their parsers (sinks, agents, tokens); durations.py parses and prints "90s"/"5m"; rollout.py is the staged
rollout's value (a node's wave, the mode it runs in), which playbooks and settings both carry.

May import: remediate.errors and the URL checks of remediate.outbound; nothing of a stage (a setting is read by
every stage, so it knows none of them).
"""
