"""`remediate agent`, the second program: one per GPU node, running the node steps the server sends it.

service.py (AgentService: plans and runs a step here), server.py (its HTTP server, on the standard
library's), state.py (its state file: action memory and seen signatures, on sqlite3 alone), gpu_faults.py
(the opt-in GPU fault watcher that posts alerts to AlertManager).

May import: agentwire (the call's shape and signatures), actions, gpu, intake's alert values, config,
errors and the small shared modules; never the server, serve, the engine, the executor or the runners
(the `agent` contract in pyproject.toml).
"""
