"""`cli._common.handle_errors`: the errors of requests and SQLAlchemy become one line, anything else stays itself.

It recognises them without importing either library (a command that never loaded one cannot have raised its
errors; `remediate agent` loads neither), so these check the recognition once they are loaded.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import requests
import sqlalchemy as sa

from remediate.cli._common import CliError, handle_errors
from remediate.errors import ConfigError


def _raising(exc: BaseException) -> Callable[[], None]:
    @handle_errors
    def command() -> None:
        raise exc

    return command


def test_a_database_error_is_one_line_with_the_driver_s_message() -> None:
    error = sa.exc.OperationalError("SELECT 1", {}, Exception("unable to open database file"))
    with pytest.raises(CliError, match=r"^database error: unable to open database file$"):
        _raising(error)()


def test_a_server_out_of_reach_and_a_failed_request_are_one_line() -> None:
    with pytest.raises(CliError, match=r"^cannot reach the server: refused$"):
        _raising(requests.ConnectionError("refused"))()
    with pytest.raises(CliError, match=r"^request to the server failed: .*Invalid URL"):
        _raising(requests.exceptions.InvalidURL("Invalid URL 'x'"))()


def test_a_remediate_error_is_its_message_and_any_other_error_is_left_alone() -> None:
    with pytest.raises(CliError, match=r"^bad setting$"):
        _raising(ConfigError("bad setting"))()
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        _raising(ZeroDivisionError("x"))()
