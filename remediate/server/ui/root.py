"""`GET /`: a person who opens the server's address in a browser means the pages (registered only while the UI
is on; without it `/` stays a JSON 404 like any unknown route)."""

from __future__ import annotations

from flask import Blueprint, Response, redirect, url_for


def create_blueprint() -> Blueprint:
    root = Blueprint("root", __name__)

    @root.get("/")
    def index() -> Response:
        return redirect(url_for("ui.history"))

    return root
