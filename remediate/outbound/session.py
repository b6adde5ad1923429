"""A `requests.Session` that reads the environment's proxy and CA settings once, when it is made.

With `trust_env` (requests' default) every request scans the whole environment for proxy variables twice
(`Session.merge_environment_settings`: `get_environ_proxies`, then `should_bypass_proxies`, each through
`urllib.request.getproxies`), looks for a `.netrc` file and reads the CA bundle variables: ~0.2 ms per POST
with 37 variables, and a pod's environment holds a few more for every Service of its namespace. A
notify step pays it on each alert. This session takes the same settings from the same environment once:
`HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` (as `urllib.request.getproxies` reads them), `NO_PROXY` matched per
host by requests' own `should_bypass_proxies` (decided once per scheme and host), `REQUESTS_CA_BUNDLE` /
`CURL_CA_BUNDLE`. What it leaves out: `.netrc` credentials (a webhook's credential is its `url_file` or
`headers_file`). remediate never changes its environment once started: reading it once reads what it is.

Imports requests: import this module only where a request is about to be sent (remediate.outbound.lazyhttp).
"""

from __future__ import annotations

import functools
import os
import urllib.parse
import urllib.request
from typing import Any

import requests
import requests.utils

BYPASS_HOSTS_KEPT = 256
"""Hosts whose NO_PROXY decision one session keeps (a notify URL's host comes from a playbook: few)."""


class EnvironmentOnceSession(requests.Session):
    """requests.Session with the environment's proxy and CA settings read at construction (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.trust_env = False
        # urllib's reading of the proxy variables (lower case first, HTTP_PROXY ignored under CGI): what
        # requests' get_environ_proxies returns for every host that NO_PROXY does not name.
        found = urllib.request.getproxies()
        self.no_proxy: str | None = found.pop("no", None)
        self.environ_proxies: dict[str, str] = found
        self.ca_bundle: str | None = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or None
        # NO_PROXY's answer per (scheme, host): requests' rule reads the environment again on each call.
        self._bypasses = functools.lru_cache(maxsize=BYPASS_HOSTS_KEPT)(self._bypasses_uncached)

    def _bypasses_uncached(self, scheme: str, netloc: str) -> bool:
        return bool(requests.utils.should_bypass_proxies(f"{scheme}://{netloc}/", no_proxy=self.no_proxy))

    def proxies_for(self, url: str) -> dict[str, str]:
        """The environment's proxies for `url`: none when NO_PROXY names its host (requests' own rule)."""
        if not self.environ_proxies:
            return {}
        parts = urllib.parse.urlsplit(url)
        if self.no_proxy and self._bypasses(parts.scheme, parts.netloc):
            return {}
        return dict(self.environ_proxies)

    def merge_environment_settings(self, url: str, proxies: Any, stream: Any, verify: Any, cert: Any) -> dict[str, Any]:
        # As requests does with trust_env: the request's own proxies first, the environment's under them,
        # and the CA bundle variable in place of verify=True.
        merged = {**self.proxies_for(url), **(proxies or {})}
        if self.ca_bundle and (verify is True or verify is None):
            verify = self.ca_bundle
        return super().merge_environment_settings(url, merged, stream, verify, cert)
