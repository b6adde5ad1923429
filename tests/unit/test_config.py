"""remediate.config.settings: defaults < config file < REMEDIATE_* environment < command-line overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from remediate.config.settings import Settings, load_settings
from remediate.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_apply_when_nothing_is_given() -> None:
    settings = load_settings(env={})

    assert settings == Settings()
    assert settings.server.bind == "127.0.0.1:9095"
    assert settings.server.workers == 2
    assert settings.store.url == "sqlite:///remediate.db"
    assert settings.engine.mode == "enforce"
    assert settings.engine.step_timeout == 300.0
    assert settings.auth.resolved("token") is None


def test_each_layer_overrides_the_one_below(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "bind: 0.0.0.0:1000\nworkers: 3\nthreads: 4\nmode: dry-run\n")
    env = {"REMEDIATE_WORKERS": "5", "REMEDIATE_THREADS": "6"}
    overrides = {"threads": 7, "bind": None}

    settings = load_settings(config_file=config, env=env, overrides=overrides)

    assert settings.engine.mode == "dry-run"  # file over default
    assert settings.server.bind == "0.0.0.0:1000"  # a None override is ignored
    assert settings.server.workers == 5  # env over file
    assert settings.server.threads == 7  # override over env
    assert settings.executor.threads == 4  # default where nobody said anything


def test_the_config_file_may_come_from_remediate_config(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "database_url: sqlite:////data/r.db\n")

    settings = load_settings(env={"REMEDIATE_CONFIG": str(config)})

    assert settings.store.url == "sqlite:////data/r.db"


def test_dashes_in_file_keys_read_as_underscores(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "executor-threads: 8\nstale-after: 2m\n")

    settings = load_settings(config_file=config, env={})

    assert settings.executor.threads == 8
    assert settings.executor.lease == 120.0


def test_unrelated_remediate_environment_variables_are_ignored() -> None:
    settings = load_settings(env={"REMEDIATE_SOMETHING_ELSE": "x", "HOME": "/root"})

    assert settings == Settings()


def test_an_unknown_key_in_the_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "bind: 0.0.0.0:1\ndatabase: sqlite:///x.db\n")

    with pytest.raises(ConfigError, match=r"unknown setting 'database'") as info:
        load_settings(config_file=config, env={})

    assert str(config) in str(info.value)


def test_every_unknown_key_is_named_not_only_the_first(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "colour: blue\nbind: 0.0.0.0:1\nsize: 3\n")

    with pytest.raises(ConfigError, match=r"unknown settings 'colour', 'size'"):
        load_settings(config_file=config, env={})


def test_a_non_string_key_in_the_file_is_a_config_error(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "1: 2\n")

    with pytest.raises(ConfigError, match="unknown setting 1"):
        load_settings(config_file=config, env={})


def test_an_unknown_override_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"command line: unknown setting 'verbose'"):
        load_settings(env={}, overrides={"verbose": True})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "top level must be a mapping"),
        ("bind: [unclosed\n", "not valid YAML"),
        ("workers: many\n", "setting 'workers'"),
        ("workers: -1\n", "setting 'workers'"),
        ("mode: approve\n", "setting 'mode': must be one of enforce, dry-run"),
        ("step_timeout: soon\n", "setting 'step_timeout'"),
        ("step_timeout: -5\n", "setting 'step_timeout'"),
        ("step_timeout: .inf\n", "setting 'step_timeout'"),
        ("insecure_no_auth: maybe\n", "setting 'insecure_no_auth'"),
        ("database_pool_size: 0\n", "setting 'database_pool_size': must be at least 1"),
        ("database_max_overflow: -1\n", "setting 'database_max_overflow': must not be negative"),
    ],
)
def test_bad_values_in_the_file_are_config_errors_naming_the_setting(tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path / "c.yaml", text)

    with pytest.raises(ConfigError, match=message):
        load_settings(config_file=config, env={})


def test_an_empty_config_file_means_defaults(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "")

    assert load_settings(config_file=config, env={}) == Settings.of(config=config)  # the file read is known


def test_a_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(config_file=tmp_path / "absent.yaml", env={})


def test_a_bad_environment_value_is_a_config_error_naming_its_source() -> None:
    with pytest.raises(ConfigError, match=r"environment: setting 'workers'"):
        load_settings(env={"REMEDIATE_WORKERS": "lots"})


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("15m", 900.0), ("90s", 90.0), ("1h30m", 5400.0), ("250ms", 0.25), ("45", 45.0), (45, 45.0), (0.5, 0.5)],
)
def test_durations_are_read_as_seconds(tmp_path: Path, written: object, seconds: float) -> None:
    config = write(tmp_path / "c.yaml", f"step_timeout: {written}\n")

    assert load_settings(config_file=config, env={}).engine.step_timeout == seconds
    assert load_settings(env={"REMEDIATE_POLL_INTERVAL": str(written)}).executor.poll_interval == seconds


def test_booleans_from_the_environment(tmp_path: Path) -> None:
    assert load_settings(env={"REMEDIATE_INSECURE_NO_AUTH": "yes"}).auth.insecure_no_auth is True
    assert load_settings(env={"REMEDIATE_INSECURE_NO_AUTH": "0"}).auth.insecure_no_auth is False


@pytest.mark.parametrize(
    ("written", "seconds"),
    [(None, 90 * 86400.0), ("30d", 30 * 86400.0), ("1d", 86400.0), ("off", 0.0), ("0", 0.0), ("OFF", 0.0)],
)
def test_retention_is_90_days_unless_set_and_off_keeps_everything(written: str | None, seconds: float) -> None:
    env = {} if written is None else {"REMEDIATE_RETENTION": written}
    assert load_settings(env=env).store.retention == seconds


@pytest.mark.parametrize("written", ["12h", "1s", "-3d", "soon"])
def test_a_retention_shorter_than_a_day_or_not_a_duration_is_refused(written: str) -> None:
    with pytest.raises(ConfigError, match="setting 'retention'"):
        load_settings(env={"REMEDIATE_RETENTION": written})


def test_the_token_file_is_read_and_stripped(tmp_path: Path) -> None:
    token_file = write(tmp_path / "token", "  s3cret-token-0123456789\n")

    settings = load_settings(env={"REMEDIATE_TOKEN_FILE": str(token_file)})

    assert settings.auth.token_file == token_file
    assert settings.auth.resolved("token") == "s3cret-token-0123456789"


def test_a_token_given_directly_wins_over_the_token_file(tmp_path: Path) -> None:
    token_file = write(tmp_path / "token", "from-the-token-file-0123\n")

    settings = load_settings(
        env={"REMEDIATE_TOKEN": "from-the-environment-0123", "REMEDIATE_TOKEN_FILE": str(token_file)}
    )

    assert settings.auth.resolved("token") == "from-the-environment-0123"


def test_an_empty_token_file_is_a_config_error(tmp_path: Path) -> None:
    token_file = write(tmp_path / "token", " \n\n")

    with pytest.raises(ConfigError, match=r"token_file .* is empty"):
        Settings.of(token_file=token_file).auth.resolved("token")


def test_a_missing_token_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read token_file"):
        Settings.of(token_file=tmp_path / "nope").auth.resolved("token")


def test_the_read_token_file_is_read_separately(tmp_path: Path) -> None:
    read_file = write(tmp_path / "read", "reader-token-0123456789\n")

    settings = load_settings(
        env={"REMEDIATE_TOKEN": "writer-token-0123456789", "REMEDIATE_READ_TOKEN_FILE": str(read_file)}
    )

    assert settings.auth.resolved("token") == "writer-token-0123456789"
    assert settings.auth.resolved("read_token") == "reader-token-0123456789"


def test_tokens_are_kept_out_of_the_repr() -> None:
    settings = Settings.of(token="do-not-print", read_token="nor-this")

    assert "do-not-print" not in repr(settings)
    assert "nor-this" not in repr(settings)


def test_the_database_pool_is_five_plus_five_unless_set() -> None:
    assert (Settings().store.pool_size, Settings().store.max_overflow) == (5, 5)
    env = {"REMEDIATE_DATABASE_POOL_SIZE": "2", "REMEDIATE_DATABASE_MAX_OVERFLOW": "0"}
    settings = load_settings(env=env)
    assert (settings.store.pool_size, settings.store.max_overflow) == (2, 0)


@pytest.mark.parametrize(
    ("given", "read_as"),
    [
        # CloudNativePG's `<cluster>-app` Secret, key `uri`: a libpq URL.
        ("postgresql://app:pw@pg-rw.db:5432/app", "postgresql+psycopg://app:pw@pg-rw.db:5432/app"),
        ("postgres://app:pw@pg/app?sslmode=require", "postgresql+psycopg://app:pw@pg/app?sslmode=require"),
        ("postgresql+psycopg://app:pw@pg/app", "postgresql+psycopg://app:pw@pg/app"),
        ("sqlite:////var/lib/remediate/remediate.db", "sqlite:////var/lib/remediate/remediate.db"),
    ],
)
def test_a_libpq_database_url_is_read_with_the_psycopg_driver_the_image_ships(given: str, read_as: str) -> None:
    """SQLAlchemy reads a bare postgresql:// as psycopg2, which the image lacks."""
    from_env = load_settings(env={"REMEDIATE_DATABASE_URL": given})
    from_flag = load_settings(env={}, overrides={"database_url": given})

    assert from_env.store.url == from_flag.store.url == read_as
    assert sa.make_url(from_env.store.url).get_dialect().driver in {"psycopg", "pysqlite"}


def test_the_agents_map_comes_from_the_config_file_as_a_mapping(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("agents:\n  node-b: http://10.0.0.7:9096/\n  node-a: http://10.0.0.5:9096\n")

    settings = load_settings(config_file=config, env={})

    assert dict(settings.agent.agents) == {"node-a": "http://10.0.0.5:9096", "node-b": "http://10.0.0.7:9096"}
    assert settings.agent.agents == (("node-a", "http://10.0.0.5:9096"), ("node-b", "http://10.0.0.7:9096"))


def test_the_agents_map_and_aliases_come_from_the_environment_as_comma_separated_pairs() -> None:
    settings = load_settings(
        env={
            "REMEDIATE_AGENTS": "node-a=http://10.0.0.5:9096, node-b=https://agent-b.example:443",
            "REMEDIATE_NODE_ALIASES": "node-b.example, 10.0.0.7",
            "REMEDIATE_NODE_NAME": "node-b",
        }
    )

    assert dict(settings.agent.agents) == {
        "node-a": "http://10.0.0.5:9096",
        "node-b": "https://agent-b.example:443",
    }
    assert settings.agent.node_aliases == ("node-b.example", "10.0.0.7")
    assert settings.agent.node_name == "node-b"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REMEDIATE_AGENTS": "node-a"}, "expected node=URL"),
        ({"REMEDIATE_AGENTS": "node-a=10.0.0.5:9096"}, "must be http(s)://host:port"),
        ({"REMEDIATE_AGENTS": "=http://x:1"}, "a node name is empty"),
        ({"REMEDIATE_GPU_POWER_FLOOR_WATTS": "-5"}, "must be a positive number"),
        ({"REMEDIATE_GPU_POWER_FLOOR_PERCENT": "150"}, "at most 100"),
        ({"REMEDIATE_AGENT_PORT": "-1"}, "must not be negative"),
        ({"REMEDIATE_AGENT_CONNECT_TIMEOUT": "soon"}, "agent_connect_timeout"),
    ],
)
def test_bad_agent_settings_are_one_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(env=env)


def test_defaults_keep_everything_on_this_host() -> None:
    settings = Settings()
    assert settings.agent.agents == ()
    assert settings.agent.selector is None
    assert settings.agent.node_name is None
    assert settings.agent.bind == "127.0.0.1:9096"
    assert settings.gpu.power_floor_watts is None


def test_the_agent_token_may_come_from_a_file(tmp_path: Path) -> None:
    token = tmp_path / "agent-token"
    token.write_text("s3cret-agent-token-0123\n")
    assert (
        load_settings(env={"REMEDIATE_AGENT_TOKEN_FILE": str(token)}).agent.resolved_token()
        == "s3cret-agent-token-0123"
    )
    assert "s3cret" not in repr(load_settings(env={"REMEDIATE_AGENT_TOKEN": "s3cret"}))


def test_the_lease_defaults_to_a_minute_and_its_old_name_stale_after_still_sets_it(tmp_path: Path) -> None:
    """The executor's lease is `lease`; `stale_after` (file, environment) is read as it."""
    assert Settings().executor.lease == 60.0
    old_file = write(tmp_path / "old.yaml", "stale_after: 90s\n")
    new_file = write(tmp_path / "new.yaml", "lease: 45s\n")

    assert load_settings(config_file=old_file, env={}).executor.lease == 90.0
    assert load_settings(config_file=new_file, env={}).executor.lease == 45.0
    assert load_settings(env={"REMEDIATE_STALE_AFTER": "30s"}).executor.lease == 30.0
    assert load_settings(env={"REMEDIATE_LEASE": "20s"}).executor.lease == 20.0
    # The environment still overrides the file, whichever name each uses.
    assert load_settings(config_file=new_file, env={"REMEDIATE_STALE_AFTER": "10s"}).executor.lease == 10.0


def test_the_lease_under_both_its_names_in_one_file_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "lease: 30s\nstale_after: 90s\n")

    with pytest.raises(ConfigError, match=r"'stale_after' is given twice \(also as 'lease'\)"):
        load_settings(config_file=config, env={})


@pytest.mark.parametrize("lease", ["1s", "500ms", "0"])
def test_a_lease_too_short_to_renew_is_refused_naming_the_minimum(lease: str) -> None:
    with pytest.raises(ConfigError, match=r"setting 'lease'.*too short: at least 2s"):
        load_settings(env={}, overrides={"lease": lease})
    with pytest.raises(ConfigError, match=r"setting 'stale_after'.*too short"):
        load_settings(env={"REMEDIATE_STALE_AFTER": lease})


def test_the_worker_timeout_is_gunicorns_60s_by_default_read_from_the_environment_and_at_least_2s() -> None:
    assert Settings().server.worker_timeout == 60.0
    assert load_settings(env={"REMEDIATE_WORKER_TIMEOUT": "90s"}).server.worker_timeout == 90.0
    with pytest.raises(ConfigError, match=r"setting 'worker_timeout'.*at least 2s"):
        load_settings(env={"REMEDIATE_WORKER_TIMEOUT": "1s"})


def test_the_replica_name_is_unset_by_default_and_read_from_the_environment() -> None:
    assert Settings().executor.replica_name is None
    assert load_settings(env={"REMEDIATE_REPLICA_NAME": "remediate-0"}).executor.replica_name == "remediate-0"


def test_prometheus_url_must_be_an_http_url_and_loses_its_trailing_slash() -> None:
    settings = load_settings(
        env={"REMEDIATE_PROMETHEUS_URL": "http://prometheus:9090/", "REMEDIATE_REPORT_WINDOW": "1d"}
    )
    assert (settings.prometheus.url, settings.report.window, settings.report.cache) == (
        "http://prometheus:9090",
        86400.0,
        60.0,
    )
    assert load_settings(env={}).prometheus.url is None
    with pytest.raises(ConfigError, match="prometheus_url must be an absolute http"):
        load_settings(env={"REMEDIATE_PROMETHEUS_URL": "prometheus:9090"})


def test_public_url_builds_links_and_loses_its_trailing_slash(tmp_path: Path) -> None:
    assert load_settings(env={"REMEDIATE_PUBLIC_URL": "https://remediate.example.com/"}).notify.public_url == (
        "https://remediate.example.com"
    )
    config = tmp_path / "remediate.yaml"
    config.write_text("public_url: http://10.0.0.5:9095/remediate/\n")
    assert load_settings(config_file=config, env={}).notify.public_url == "http://10.0.0.5:9095/remediate"
    assert load_settings(env={}).notify.public_url is None
    with pytest.raises(ConfigError, match="public_url must be an absolute http"):
        load_settings(env={"REMEDIATE_PUBLIC_URL": "remediate.example.com"})


SHORT = "fifteen-chars-x"  # one short of the minimum


@pytest.mark.parametrize(
    ("setting", "resolve"),
    [
        ("token", lambda s: s.auth.credentials()),
        ("webhook_token", lambda s: s.auth.credentials()),
        ("operator_token", lambda s: s.auth.credentials()),
        ("read_token", lambda s: s.auth.credentials()),
        ("agent_token", lambda s: s.agent.resolved_token()),
        ("agent_node_token", lambda s: s.agent.resolved_node_token()),
    ],
)
def test_a_token_shorter_than_16_characters_is_refused_naming_its_setting(
    tmp_path: Path, setting: str, resolve: object
) -> None:
    """A 1-character token was accepted from the environment or a file."""
    assert callable(resolve)
    env = f"REMEDIATE_{setting.upper()}"
    with pytest.raises(ConfigError, match=rf"^{setting} \({env}\): a token needs at least 16 characters, not 15"):
        resolve(load_settings(env={env: SHORT}))
    short_file = write(tmp_path / setting, f"  {SHORT}\n")
    with pytest.raises(ConfigError, match=rf"^{setting}_file {short_file}: a token needs at least 16 characters"):
        resolve(load_settings(env={f"{env}_FILE": str(short_file)}))
    assert resolve(load_settings(env={env: SHORT + "y"}))  # 16 characters will do


def test_a_short_tokens_file_entry_is_refused_too(tmp_path: Path) -> None:
    tokens = write(tmp_path / "tokens.yaml", f"alice: {SHORT}\n")
    with pytest.raises(ConfigError, match=rf"tokens_file {tokens}, 'alice': the token must be .* at least 16"):
        Settings.of(tokens_file=tokens).auth.credentials()
