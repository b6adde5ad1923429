"""`requests` loaded by the first request a process sends, not by importing the modules that may send one.

requests with urllib3, charset_normalizer and idna is ~4.7 MiB of every process that imports it. Every action
is built when the registry is (the node agent, and the master of `remediate serve` imports them all), and
neither the agent nor the HTTP workers ever send: a chat or notify action that made its `requests.Session` in
its constructor, or a module that imported requests at its top, loaded it into every agent on every node and
into the server's shared pages (the agent's idle RSS and the server's idle PSS, docs/benchmarks.md). Senders
import requests in the functions that send, and hold their session in a `SessionSlot`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests


class SessionSlot:
    """A sender's `requests.Session` attribute: the session assigned to it (a test's), else one made on first read
    (remediate.outbound.session: the environment's proxy settings read then, not on every request).

    Declared on the class (`session = SessionSlot()`), assigned in the constructor (`self.session = session`,
    None for "make one when needed"); each instance gets its own session, as each made one before.
    """

    _lock = threading.Lock()  # two executor threads reading it first at once make one session, not two

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = f"_{name}_slot"

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        session = instance.__dict__.get(self.attribute)
        if session is None:
            with self._lock:
                session = instance.__dict__.get(self.attribute)
                if session is None:
                    from remediate.outbound.session import EnvironmentOnceSession

                    session = instance.__dict__[self.attribute] = EnvironmentOnceSession()
        return session

    def __set__(self, instance: Any, session: requests.Session | None) -> None:
        instance.__dict__[self.attribute] = session
