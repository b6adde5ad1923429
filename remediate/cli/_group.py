"""The `remediate` click group itself, `main`; the command modules register their commands on it.

It imports none of them, so they can import it without a cycle; remediate/cli/__init__.py imports
every command module and re-exports this group.
"""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="remediate")
def main() -> None:
    """Turn Prometheus AlertManager alerts into safe, audited fixes.

    Settings come from (lowest to highest): defaults, --config FILE (or $REMEDIATE_CONFIG),
    REMEDIATE_* environment variables, then command-line flags.
    """
