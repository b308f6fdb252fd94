"""`txbuffer spark` flags reach run_job (no JVM: the session and the job are stand-ins)."""

from __future__ import annotations

import pytest

from processor.cli.app import build_parser

BASE = ["spark", "--bootstrap", "k:9092", "--checkpoint", "s3a://b/ck", "--output", "s3a://b/lake"]


def parse(*extra: str):
    return build_parser().parse_args([*BASE, *extra])


def test_merge_threads_defaults_to_four():
    assert parse().merge_threads == 4


def test_merge_threads_is_parsed():
    assert parse("--merge-threads", "1").merge_threads == 1
    assert parse("--merge-threads", "8").merge_threads == 8


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_merge_threads_rejects_non_positive(bad, capsys):
    with pytest.raises(SystemExit):
        parse("--merge-threads", bad)
    assert "--merge-threads" in capsys.readouterr().err


def test_merge_threads_reaches_run_job(monkeypatch):
    import processor.spark.job as job

    calls: dict = {}

    class FakeSession:
        stopped = False

        def stop(self):
            FakeSession.stopped = True

    def fake_session(conf=None, **_):
        calls["conf"] = conf
        return FakeSession()

    def fake_run_job(*args, **kwargs):
        calls["args"], calls["kwargs"] = args, kwargs
        return {"batches": 0}

    monkeypatch.setattr(job, "spark_session", fake_session)
    monkeypatch.setattr(job, "run_job", fake_run_job)
    args = parse("--merge-threads", "2", "--conf", "spark.sql.shuffle.partitions=4", "--fold-every", "3")
    assert args.func(args) == 0
    assert calls["kwargs"]["merge_threads"] == 2
    assert calls["kwargs"]["fold_every"] == 3
    assert calls["args"][:4] == ("k:9092", "txbuffer.changes", "s3a://b/ck", "s3a://b/lake")
    assert calls["conf"] == {"spark.sql.shuffle.partitions": "4"}
    assert FakeSession.stopped


def test_run_job_refuses_an_unknown_stage_before_starting_spark(monkeypatch):
    """The bench's --stage cuts (decode, dedup, changelog, full) are checked before any session."""
    import processor.spark.job as job

    def no_session(*_, **__):
        raise AssertionError("a session was started for a bad stage")

    monkeypatch.setattr(job, "spark_session", no_session)
    assert job.STAGES == ("decode", "dedup", "changelog", "full")
    with pytest.raises(ValueError, match="unknown stage 'merge'"):
        job.run_job("k:9092", "t", "/ck", "/out", stage="merge")


def test_fold_every_is_left_to_the_session_conf_unless_given():
    assert parse().fold_every is None  # run_job then reads spark.txbuffer.state.foldEvery, else 1
    with pytest.raises(SystemExit):
        parse("--fold-every", "0")
