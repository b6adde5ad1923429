"""HTTPS settings are checked before gunicorn starts: one clear error, not a worker that fails to boot."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediate.config.settings import ServerSettings
from remediate.errors import ConfigError
from remediate.serve.tls import gunicorn_tls_options


def test_plain_http_without_tls_files() -> None:
    assert gunicorn_tls_options(ServerSettings()) == {}


def test_a_certificate_without_its_key_or_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    with pytest.raises(ConfigError, match="needs both tls_cert_file and tls_key_file"):
        gunicorn_tls_options(ServerSettings(tls_cert_file=cert))
    with pytest.raises(ConfigError, match=r"tls\.crt: no such file"):
        gunicorn_tls_options(ServerSettings(tls_cert_file=cert, tls_key_file=tmp_path / "tls.key"))
    cert.write_text("not a certificate\n")
    (tmp_path / "tls.key").write_text("not a key\n")
    with pytest.raises(ConfigError, match="a PEM certificate and the private key that belongs to it"):
        gunicorn_tls_options(ServerSettings(tls_cert_file=cert, tls_key_file=tmp_path / "tls.key"))
