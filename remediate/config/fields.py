"""How a section of the settings declares a setting (`setting()`): its default, its converter and the flat name
users write. Its own module, so that a section may live in a module of its own (remediate.config.burnin) and
remediate.config.settings gathers them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any


def setting(default: Any, convert: Callable[[Any], Any], *, flat: str | None = None, secret: bool = False) -> Any:
    """A field of a section: `convert` reads a user's value (ValueError names the problem); `flat` is the
    name users write when it is not the section's PREFIX + the field's name; `secret`: never in a repr."""
    return field(default=default, repr=not secret, metadata={"convert": convert, "flat": flat})
