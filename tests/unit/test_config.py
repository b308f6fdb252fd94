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


def test_kafka_properties_merge_file_then_yaml_then_env_then_flags(tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\nsasl.mechanism=PLAIN\nclient.id=from-file\nlinger.ms=1\n")
    f = tmp_path / "c.yaml"
    f.write_text(
        f"client_properties: {props}\nkafka:\n  client.id: from-yaml\n  enable.ssl.certificate.verification: false\n"
    )
    env = {"TXBUFFER_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "TXBUFFER_KAFKA_LINGER_MS": "2"}
    cfg = load_config(f, env=env, overrides={"kafka": {"linger.ms": "3"}})
    assert cfg.kafka == {
        "security.protocol": "SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "from-yaml",
        "linger.ms": "3",
        "enable.ssl.certificate.verification": "false",
    }
    assert cfg.kafka_client().base()["bootstrap.servers"] == cfg.bootstrap


def test_kafka_config_flags_and_bad_properties_are_clear(tmp_path, monkeypatch):
    monkeypatch.delenv("TXBUFFER_BOOTSTRAP", raising=False)
    args = build_parser().parse_args(
        ["run", "--kafka-config", "security.protocol=SSL", "--kafka-config", "ssl.key.password=k", "--bootstrap", "h:1"]
    )
    cfg = config_from_args(args)
    assert cfg.kafka == {"security.protocol": "SSL", "ssl.key.password": "k"} and cfg.bootstrap == "h:1"
    assert "ssl.key.password': '***'" in repr(cfg) and "'k'" not in repr(cfg)
    with pytest.raises(ConfigError, match=r"bootstrap.servers is set by the `bootstrap` setting"):
        load_config(env={"TXBUFFER_KAFKA_BOOTSTRAP_SERVERS": "x:1"})
    with pytest.raises(ConfigError, match=r"client_properties: .*not found"):
        load_config(env={"TXBUFFER_CLIENT_PROPERTIES": str(tmp_path / "absent")})
    with pytest.raises(ConfigError, match="PROPERTY=VALUE"):
        config_from_args(build_parser().parse_args(["run", "--kafka-config", "oops"]))


@pytest.mark.parametrize("command", ["generate", "replay oracle f.csv"])
def test_every_kafka_command_reads_the_same_connection_settings(command, monkeypatch):
    monkeypatch.setenv("TXBUFFER_BOOTSTRAP", "env-host:9092")
    monkeypatch.setenv("TXBUFFER_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    args = build_parser().parse_args([*command.split(), "--kafka-config", "sasl.mechanism=PLAIN"])
    cfg = config_from_args(args)
    assert cfg.bootstrap == "env-host:9092"
    assert cfg.kafka == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert (
        config_from_args(build_parser().parse_args([*command.split(), "--bootstrap", "flag:1"])).bootstrap == "flag:1"
    )


def test_a_backlog_defers_settling_up_to_20_ms_unless_turned_off():
    # at_least_once under a backlog (delivery.py); 0 settles every batch.
    assert load_config(None, env={}).settle_interval_ms == 20
    assert load_config(None, env={"TXBUFFER_SETTLE_INTERVAL_MS": "0"}).settle_interval_ms == 0


def test_exactly_once_polls_bigger_batches_unless_max_batch_is_set():
    # One Kafka transaction per batch: a fixed broker cost that bigger batches amortise.
    assert load_config(None, env={}).max_batch == 5000
    assert load_config(None, env={}, overrides={"guarantee": "exactly_once"}).max_batch == 20000
    set_by_env = load_config(None, env={"TXBUFFER_GUARANTEE": "exactly_once", "TXBUFFER_MAX_BATCH": "300"})
    assert set_by_env.max_batch == 300
