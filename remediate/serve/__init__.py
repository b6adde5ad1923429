"""The process model of `remediate serve`: gunicorn's master, its HTTP workers and the executor process.

launcher.py (the launch, the master, the executor process, the wake socket, the preflight), startup.py (the
start-up block logged once), reload.py (a reload in each process), lifetime.py (what is the master's
alone), httpworker.py (the worker that buffers each request), tls.py (HTTPS options), proctitle.py (each
role's process title).

May import everything it starts: the server (the Flask app), services, the executor, the store, config.
Nothing imports it but the command line (cli/serve.py): it is the top of the `serve` program.
"""
