"""The history as its readers see it: /history, /runs/<id> and the CLI's `history`, `runs`, `show`.

api.py builds the JSON shapes of API v1 from the store's typed history rows (the HTTP server answers with them
and the CLI prints the same shapes, reading the database or a server); secrets.py hides what a URL or a header
of a stored step carries. The rows themselves are the store's (remediate.store.history).

May import: the store's history rows, runs, judging's ladder standing and the URL checks of remediate.outbound;
no HTTP (the CLI imports it without Flask).
"""
