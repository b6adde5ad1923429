"""The dependencies as shipped: pyproject's floors admit no release with a known vulnerability, constraints.txt
(what the image and the test venv install) pins every runtime package within pyproject's ranges, and the
gunicorn whose undocumented internals remediate/serve builds on (its gthread worker and connection classes, its
arbiter, util._setproctitle: GUNICORN_CHECKED lists each) is the minor release they were checked against.
(torch, the training jobs' own, is checked the same way by tests/unit/training/test_checkpoints.py.)"""

from __future__ import annotations

import re
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from remediate.serve.httpworker import GUNICORN_CHECKED
from remediate.training.handlers import TORCH_CHECKED
from scripts import constraints
from tests.support.training import require

FIXED = {
    # name: the first release without the known vulnerability (CVE / advisory in pyproject.toml's comment).
    "jinja2": "3.1.6",
    "requests": "2.32.4",
    "urllib3": "2.7.0",
    "flask": "3.1.3",
    "werkzeug": "3.1.6",
    "gunicorn": "23.0.0",
    "orjson": "3.11.6",
    "python-json-logger": "3.3.0",
}


def _requirements() -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in constraints.runtime_requirements()}


@pytest.mark.parametrize(("name", "fixed"), sorted(FIXED.items()))
def test_no_release_below_the_fix_of_a_known_vulnerability_is_allowed(name: str, fixed: str) -> None:
    specifier = _requirements()[name].specifier
    floors = [Version(s.version) for s in specifier if s.operator == ">="]
    assert floors, f"{name}{specifier} has no floor"
    assert max(floors) >= Version(fixed), f"{name}{specifier} admits releases before {fixed}"


def test_the_constraints_pin_every_runtime_requirement_within_pyprojects_range() -> None:
    pins = constraints.read()
    for name, requirement in _requirements().items():
        assert name in pins, f"constraints.txt does not pin {name}: run scripts/sync-generated"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject's {requirement}: run scripts/sync-generated"
        )
        for extra in requirement.extras:  # psycopg[binary,pool]: its extras' packages are pinned too
            assert {"binary": "psycopg-binary", "pool": "psycopg-pool"}[extra] in pins, extra


def test_the_constraints_pin_exact_versions_of_every_package_the_requirements_pull_in() -> None:
    pins = constraints.read()
    assert constraints.CONSTRAINTS.read_text().count("==") == len(pins)
    for name, version in pins.items():
        distribution = metadata.distribution(name)
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in pins, f"{name}=={version} needs {requirement}, which constraints.txt does not pin"
            assert requirement.specifier.contains(pins[dependency], prereleases=True), (name, requirement)


CHECKED = {
    # package: (the minor release its private seams were checked against, what to read before moving it)
    "gunicorn": (
        GUNICORN_CHECKED,
        "remediate/serve builds on its undocumented internals: check each seam GUNICORN_CHECKED lists "
        "(remediate/serve/httpworker.py) against this release, then move it and pyproject's range together",
    ),
    "torch": (
        TORCH_CHECKED,
        "scale_lr sets LRScheduler._last_lr and reads SequentialLR's and ChainedScheduler's _schedulers: read this "
        "release's torch/optim/lr_scheduler.py, then move TORCH_CHECKED (remediate/training/handlers.py)",
    ),
}


@pytest.mark.parametrize("package", sorted(CHECKED))
def test_the_installed_release_is_the_minor_its_private_seams_were_checked_against(package: str) -> None:
    if package == "torch":
        require("torch")  # a training extra: the seam exists only where a job installed torch
    checked, what_to_check = CHECKED[package]
    installed = Version(metadata.version(package))
    assert installed.release[:2] == checked, (
        f"{package} {installed} is installed, checked against {checked[0]}.{checked[1]}; {what_to_check}"
    )


def test_pyproject_allows_only_that_gunicorn_minor() -> None:
    major, minor = GUNICORN_CHECKED
    specifier = _requirements()["gunicorn"].specifier
    assert specifier.contains(f"{major}.{minor}.0") and specifier.contains(f"{major}.{minor}.99")
    assert not specifier.contains(f"{major}.{minor + 1}.0"), f"gunicorn{specifier} admits {major}.{minor + 1}"
    assert not specifier.contains(f"{major + 1}.0.0"), f"gunicorn{specifier} admits {major + 1}.0"


def test_every_pip_step_of_the_dockerfile_installs_with_the_constraints() -> None:
    """What the image test checks by its result (the image's versions are the pins), read from the Dockerfile: a pip
    step without `-c` would install whatever is newest the day the image is built, which may still match today."""
    dockerfile = (constraints.ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    steps = [line for line in dockerfile.splitlines() if line.startswith("RUN ") and " pip " in line]
    assert len(steps) == 2, steps  # the wheels, then the install
    for step in steps:
        given = re.search(r"\s-c\s+(\S+)", step)
        assert given is not None and given.group(1).endswith("constraints.txt"), step
    assert "COPY pyproject.toml README.md constraints.txt ./" in dockerfile
