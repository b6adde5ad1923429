"""Cleanup policies: loading, errors naming file/policy/field, sizes, globs, the setting that points at the file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from remediate.config.settings import Settings, load_settings
from remediate.disk import NoPoliciesConfigured, PolicyError, PolicySource, load_policies, parse_size
from remediate.disk.patterns import GlobError, PathMatcher
from remediate.disk.policy import DEFAULT_MAX_FILES, parse_policies

ROOT = Path(__file__).resolve().parents[3]


def policy(**fields: Any) -> dict[str, Any]:
    return {"name": "scratch", "mountpoint": "/data", "roots": ["/data/scratch"], "patterns": ["*.tmp"], **fields}


def test_a_minimal_policy_gets_safe_defaults() -> None:
    (loaded,) = parse_policies({"policies": [policy()]})
    assert loaded.min_age == 3600
    assert loaded.keep_newest == 0
    assert loaded.max_files == DEFAULT_MAX_FILES
    assert loaded.max_bytes is None
    assert loaded.truncate_logs is None


def test_every_field_is_read(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(
        """
policies:
  - name: ckpt
    description: checkpoints
    mountpoint: /ckpt
    roots: [/ckpt/runs/, /ckpt/old]
    patterns: ["*/ckpt-*.pt"]
    exclude: ["best-*"]
    min_age: 6h
    keep_newest: 3
    max_bytes: 1.5TiB
    max_files: null
    truncate_logs: {patterns: ["*.log"], over_bytes: 1GiB, keep_tail_bytes: 100MiB}
"""
    )
    policies = load_policies(path)
    loaded = policies.by_mountpoint("/ckpt")
    assert loaded is not None and loaded is policies.by_name("ckpt")
    assert loaded.roots == ("/ckpt/runs", "/ckpt/old")
    assert loaded.min_age == 6 * 3600
    assert loaded.keep_newest == 3
    assert loaded.max_bytes == int(1.5 * 2**40)
    assert loaded.max_files is None
    assert loaded.truncate_logs is not None
    assert (loaded.truncate_logs.over_bytes, loaded.truncate_logs.keep_tail_bytes) == (2**30, 100 * 2**20)
    assert loaded.deletable("run-1/ckpt-100.pt") and not loaded.deletable("run-1/best-ckpt-1.pt")
    assert loaded.truncatable("train.log")


def test_the_mountpoint_is_matched_exactly() -> None:
    policies = parse_policies({"policies": [policy(), policy(name="root", mountpoint="/", roots=["/tmp"])]})
    assert policies.by_mountpoint("/data") is not None
    assert policies.by_mountpoint("/data/") is None
    assert policies.by_mountpoint("/data/scratch") is None
    assert policies.by_mountpoint("/DATA") is None
    assert policies.by_mountpoint("/")
    assert policies.by_mountpoint("/").name == "root"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"name": "bad name"}, "policies[0].name", "must be a name"),
        ({"mountpoint": "data"}, "mountpoint", "absolute path"),
        ({"roots": []}, "roots", "non-empty list"),
        ({"roots": ["relative/dir"]}, "roots[0]", "absolute directory path"),
        ({"roots": ["/"]}, "roots[0]", "filesystem root '/'"),
        ({"roots": ["/proc/1"]}, "roots[0]", "kernel or device filesystem"),
        ({"roots": ["/data/../etc"]}, "roots[0]", "'..'"),
        ({"roots": ["/data/a", "/data/a/b"]}, "roots[1]", "overlaps root /data/a"),
        ({"patterns": []}, "patterns", "non-empty list"),
        ({"patterns": ["/abs/*.tmp"]}, "patterns[0]", "relative"),
        ({"patterns": ["../*.tmp"]}, "patterns[0]", "'..'"),
        ({"exclude": [3]}, "exclude[0]", "must be a string"),
        ({"min_age": "soon"}, "min_age", "not a duration"),
        ({"keep_newest": -1}, "keep_newest", "at least 0"),
        ({"max_files": 0}, "max_files", "at least 1"),
        ({"max_bytes": "lots"}, "max_bytes", "not a size"),
        ({"frobnicate": 1}, "frobnicate", "unknown key"),
        ({"truncate_logs": {"patterns": ["*.log"], "over_bytes": "1GiB"}}, "truncate_logs.keep_tail_bytes", "missing"),
        (
            {"truncate_logs": {"patterns": ["*.log"], "over_bytes": 100, "keep_tail_bytes": 100}},
            "truncate_logs.keep_tail_bytes",
            "smaller than over_bytes",
        ),
    ],
)
def test_a_bad_field_is_named_with_the_file_and_the_policy(
    tmp_path: Path, fields: dict[str, Any], field: str, message: str
) -> None:
    path = tmp_path / "policies.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"policies": [policy(**fields)]}))
    with pytest.raises(PolicyError) as caught:
        load_policies(path)
    error = caught.value
    assert error.file == str(path)
    assert error.field == field
    assert message in str(error)
    assert str(error).startswith(f"cleanup policies file {path}")
    if field != "policies[0].name":
        assert error.policy == "scratch"
        assert "policy 'scratch'" in str(error)


def test_names_and_mountpoints_must_be_unique() -> None:
    with pytest.raises(PolicyError, match="a second policy with this name"):
        parse_policies({"policies": [policy(), policy(mountpoint="/other")]})
    with pytest.raises(PolicyError, match="already served by policy 'scratch'"):
        parse_policies({"policies": [policy(), policy(name="other")]})


@pytest.mark.parametrize(
    ("text", "message"),
    [("policies: [", "not valid YAML"), ("- a\n- b\n", "top level must be a mapping"), ("rules: []", "unknown key")],
)
def test_a_broken_file_names_itself(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=message) as caught:
        load_policies(path)
    assert str(path) in str(caught.value)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read it: No such file"):
        load_policies(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (512, 512),
        ("512", 512),
        ("10GiB", 10 * 2**30),
        ("10Gi", 10 * 2**30),
        ("1.5G", 1_500_000_000),
        ("200MB", 200_000_000),
        ("4 KiB", 4096),
        ("1tb", 10**12),
    ],
)
def test_sizes_read_as_people_write_them(text: Any, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1", "1 XB", "lots", True, None, float("inf"), "1e400"])
def test_nonsense_sizes_are_refused(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.tmp", "a.tmp", True),
        ("*.tmp", "deep/dir/a.tmp", True),
        ("*.tmp", "a.tmp.keep", False),
        ("*", ".hidden", True),
        ("cache/*", "cache/x", True),
        ("cache/*", "cache/sub/x", False),
        ("cache/*", "other/cache/x", False),
        ("*/ckpt-*.pt", "run/ckpt-1.pt", True),
        ("*/ckpt-*.pt", "ckpt-1.pt", False),
        ("**/cache/*", "cache/x", True),
        ("**/cache/*", "a/b/cache/x", True),
        ("runs/*/tmp/**", "runs/r1/tmp/a/b/c", True),
        ("runs/*/tmp/**", "runs/r1/tmp", False),
        ("core.[0-9]*", "core.123", True),
        ("core.[0-9]*", "core.x", False),
        ("*.TMP", "a.tmp", False),
    ],
)
def test_globs_match_relative_paths(pattern: str, path: str, matches: bool) -> None:
    assert PathMatcher([pattern]).matches(path) is matches


@pytest.mark.parametrize("pattern", ["", "/a", "a/", "a//b", "./a", "a/../b"])
def test_unusable_globs_are_refused(pattern: str) -> None:
    with pytest.raises(GlobError):
        PathMatcher([pattern])


def test_the_example_policies_file_loads() -> None:
    policies = load_policies(ROOT / "docs" / "cleanup-policies.example.yaml")
    assert len(policies) >= 2
    assert all(p.roots and p.patterns for p in policies)


def test_the_policies_file_setting_comes_from_file_env_and_flags(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cleanup_policies_file: /etc/remediate/from-file.yaml\n")
    assert Settings().disk.cleanup_policies_file is None
    assert load_settings(config_file=config, env={}).disk.cleanup_policies_file == Path("/etc/remediate/from-file.yaml")
    env = {"REMEDIATE_CLEANUP_POLICIES_FILE": "/etc/remediate/from-env.yaml"}
    assert load_settings(config_file=config, env=env).disk.cleanup_policies_file == Path("/etc/remediate/from-env.yaml")
    flags = {"cleanup_policies_file": "/from-flag.yaml"}
    assert load_settings(config_file=config, env=env, overrides=flags).disk.cleanup_policies_file == Path(
        "/from-flag.yaml"
    )
    assert load_settings(env={"REMEDIATE_CLEANUP_POLICIES_FILE": ""}).disk.cleanup_policies_file is None


def test_the_policy_source_loads_lazily_and_reloads_when_the_file_changes(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "policies.yaml"
    source = PolicySource(path)  # nothing read yet: the file does not even exist
    with pytest.raises(PolicyError, match="cannot read it"):
        source()
    path.write_text(yaml.safe_dump({"policies": [policy()]}))
    first = source()
    assert first.names() == ["scratch"]
    assert source() is first
    path.write_text(yaml.safe_dump({"policies": [policy(), policy(name="two", mountpoint="/two")]}))
    os.utime(path, ns=(0, 10**9))  # a different mtime even on coarse clocks
    assert source().names() == ["scratch", "two"]
    path.write_text("policies: [")
    os.utime(path, ns=(0, 2 * 10**9))
    with pytest.raises(PolicyError, match="not valid YAML"):
        source()
    with pytest.raises(NoPoliciesConfigured, match="REMEDIATE_CLEANUP_POLICIES_FILE"):
        PolicySource(None)()
