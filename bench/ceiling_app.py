"""The ceiling for bench/ingest.py: a bare Flask handler that parses the webhook JSON and answers 200.

Run under gunicorn with the same settings as `remediate serve` (sync workers), e.g.
`gunicorn --workers 2 --chdir bench ceiling_app:app`. No auth, no validation, no store:
whatever remediate does on top of this is its own cost.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Flask, jsonify, request

app = Flask("ceiling")


@app.post("/webhook")
def webhook() -> Any:
    data = json.loads(request.get_data(cache=False))
    return jsonify({"alerts": len(data.get("alerts", []))})


@app.get("/healthz")
def healthz() -> Any:
    return jsonify({"status": "ok"})
