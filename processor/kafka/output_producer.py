"""Which producer writes the outputs: the native one where it can, confluent-kafka's otherwise.

processor.kafka._rdkafka_producer.NativeProducer drives the same librdkafka through its C API and
reports only failed records to Python (bench: ~1.1 µs less main-thread CPU per record than
confluent-kafka's produce with a delivery callback, docs/benchmarks.md), and makes exactly_once's
transactional calls too. It takes no Python callback but error_cb, so a config with another callback
(stats_cb, oauth_cb, logger, ...) gets confluent-kafka's Producer.

The choice (config `output_producer`, env TXBUFFER_OUTPUT_PRODUCER): auto = native when it is built
and can serve; native = that, or an error saying why not; confluent = always confluent-kafka's.
TXBUFFER_CODEC=compiled (set by `make test`) makes auto require the build, as it does for the codec.
The sources' RawTopicWriter (kafka/rawtopic.py) takes its producer from here too.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from processor.core import codec

try:
    from processor.kafka._rdkafka_producer import NativeProducer  # type: ignore[import-not-found]

    UNAVAILABLE = ""
except ImportError as exc:  # not built (no C compiler), or a librdkafka without what it needs
    NativeProducer = None
    UNAVAILABLE = str(exc)

CHOICES = ("auto", "native", "confluent")
# Python-side settings NativeProducer handles itself; any other callable needs confluent-kafka.
_NATIVE_CALLBACKS = frozenset({"error_cb"})


def why_not_native(conf: dict[str, Any]) -> str:
    """Why NativeProducer cannot serve conf ("" when it can)."""
    if UNAVAILABLE:
        return f"not built: {UNAVAILABLE}"
    callbacks = sorted(k for k, v in conf.items() if callable(v) and k not in _NATIVE_CALLBACKS)
    if callbacks:
        return f"callbacks {callbacks} need confluent-kafka"
    return ""


def output_producer(conf: dict[str, Any], choice: str = "auto") -> tuple[Any, str]:
    """(producer, why this one) for the outputs, from a full producer config (client defaults included)."""
    if choice not in CHOICES:
        raise ValueError(f"output_producer must be one of {CHOICES}, not {choice!r}")
    if choice == "confluent":
        return Producer(conf), "confluent: configured"
    reason = why_not_native(conf)
    required = choice == "native" or (bool(UNAVAILABLE) and codec.builds_required())
    if reason:
        if required:
            raise RuntimeError(f"the native output producer is required but cannot serve: {reason}")
        return Producer(conf), f"confluent: {reason}"
    return NativeProducer(conf), "native"
