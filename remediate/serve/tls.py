"""HTTPS for `remediate serve` (tls_cert_file, tls_key_file): the options given to gunicorn, checked before it
starts, so a missing or mismatched key is one clear start-up error rather than a worker that fails to boot.

gunicorn wraps each connection with an SSLContext made from these files; the worker (remediate.serve.httpworker)
does the TLS handshake in its event loop, as it reads plain requests, so a client that opens a connection and
sends nothing (or a handshake a byte at a time) holds no thread, and the request deadline covers the handshake.
"""

from __future__ import annotations

import ssl
from typing import Any

from remediate.config.settings import ServerSettings
from remediate.errors import ConfigError


def gunicorn_tls_options(server: ServerSettings) -> dict[str, Any]:
    """gunicorn's certfile/keyfile for `server`, or nothing (plain HTTP); ConfigError when they cannot serve."""
    cert, key = server.tls_cert_file, server.tls_key_file
    if cert is None and key is None:
        return {}
    if cert is None or key is None:
        raise ConfigError("HTTPS needs both tls_cert_file and tls_key_file (the certificate and its private key)")
    for path in (cert, key):
        if not path.is_file():
            raise ConfigError(f"cannot serve HTTPS: {path}: no such file")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile=cert, keyfile=key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot serve HTTPS with tls_cert_file {cert} and tls_key_file {key}: {exc} (a PEM certificate "
            "and the private key that belongs to it)"
        ) from exc
    return {"certfile": str(cert), "keyfile": str(key)}
