"""The web pages: the history, one run, and the state that gates everything, rendered on the server.

`create_blueprint(UiDeps)` is all `remediate.server` needs; docs/ui.md describes the pages, the login,
the session cookie and the CSRF tokens.
"""

from remediate.server.ui.views import UiDeps, create_blueprint

__all__ = ["UiDeps", "create_blueprint"]
