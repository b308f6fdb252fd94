"""processor/config.py: one model for flags, environment and file, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.cli.app import build_parser
from processor.cli.run import config_from_args
from processor.runtime.config import ConfigError, ProcessorConfig, load_config


def test_defaults_are_valid():
    cfg = load_config(env={})
    assert cfg.guarantee == "at_least_once_dedup" and cfg.ordering == "partition"
    assert cfg.state_dir == Path("state")


def test_precedence_is_flags_over_env_over_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("group: from-file\nordering: global\nmax_batch: 10\nstate-dir: /srv/s\n")
    cfg = load_config(f, env={"TXBUFFER_GROUP": "from-env", "TXBUFFER_MAX_BATCH": "20"}, overrides={"max_batch": 30})
    assert (cfg.group, cfg.ordering, cfg.max_batch, cfg.state_dir) == ("from-env", "global", 30, Path("/srv/s"))


def test_none_overrides_mean_not_given():
    assert load_config(env={"TXBUFFER_GROUP": "g"}, overrides={"group": None}).group == "g"


def test_csv_filters_from_the_environment():
    cfg = load_config(env={"TXBUFFER_EXCLUDE_USERS": "batch, etl ,", "TXBUFFER_INCLUDE_TABLES": "s.a"})
    assert cfg.exclude_users == frozenset({"batch", "etl"}) and cfg.include_tables == frozenset({"s.a"})


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"guarantee": "maybe"}, "guarantee"),
        ({"ordering": "random"}, "ordering"),
        ({"max_batch": 0}, "max_batch"),
        ({"metrics_port": 70000}, "metrics_port"),
        ({"commit_interval_ms": "soon"}, "commit_interval_ms"),
        ({"lost_state_policy": "ignore"}, "lost_state_policy"),
        ({"bogus_field": 1}, "bogus_field"),
    ],
)
def test_bad_values_fail_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"invalid configuration: .*{field}"):
        load_config(env={}, overrides=overrides)


def test_unknown_key_in_file_and_missing_file_are_clear_errors(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("grup: typo\n")
    with pytest.raises(ConfigError, match="grup"):
        load_config(f, env={})
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.yaml", env={})
    f.write_text("- a list\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(f, env={})


def test_every_field_is_a_run_flag_and_flags_reach_the_model(monkeypatch):
    for name in ProcessorConfig.model_fields:
        monkeypatch.delenv("TXBUFFER_" + name.upper(), raising=False)
    args = build_parser().parse_args(
        [
            "run",
            "--available-now",
            "--ordering",
            "global",
            "--max-batch",
            "7",
            "--exclude-tables",
            "s.a,s.b",
            "--state-dir",
            "/tmp/x",
        ]
    )
    cfg = config_from_args(args)
    assert cfg.available_now and cfg.ordering == "global" and cfg.max_batch == 7
    assert cfg.exclude_tables == frozenset({"s.a", "s.b"}) and cfg.state_dir == Path("/tmp/x")
    help_text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for name in ProcessorConfig.model_fields:
        assert "--" + name.replace("_", "-") in help_text, name


def test_invalid_flag_value_makes_run_exit_2(capsys):
    from processor.cli.app import main

    assert main(["--log-format", "json", "run", "--guarantee", "sometimes"]) == 2
