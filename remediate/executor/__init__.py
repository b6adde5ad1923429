"""The executor: background threads that claim committed runs and execute their steps in order.

Its story is one module per part (the loop and its threads; leases and recovery; a run's steps; what an
action sees; late outcomes; metrics): docs/architecture.md's tree names each, and a test keeps it true.
Where a step runs is the step-to-action hop: dispatch.py picks a runner (runners.py: here, refused;
agent_calls.py: the node's agent over HTTP). Beside the runs, two listeners of the executor process:
announce.py (the chat message that a run awaits approval) and grafana.py (an annotation per run); beat.py is
its heartbeat as the master and the HTTP workers read it. This file imports nothing: the master loads beat.py
alone (its idle memory), so `Executor` is imported from remediate.executor.loop.

May import: the store, actions, kube (owners, agent discovery), agentwire (the agent call's protocol and
auth), config; never judging (ingest; pyproject.toml's `engine-executor` contract) nor HTTP serving.
"""
