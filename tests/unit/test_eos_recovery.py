"""Which failed exactly_once commits the runner recovers from in process (processor/kafka/delivery.py
raises TransactionAborted; processor/runtime/eos_recovery.py rewinds). End to end on Apache Kafka:
tests/integration/test_eos_rebalance.py."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from processor.kafka.delivery import ExactlyOnce, TransactionAborted
from processor.runtime.emitter import Emitter

from .test_exactly_once_flow import Consumer, RecordingProducer, Sink


class OffsetsRefused(RecordingProducer):
    """send_offsets_to_transaction fails as the group coordinator answers it."""

    def __init__(self, error: KafkaError):
        super().__init__()
        self.error = error

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self.calls.append("offsets")
        raise KafkaException(self.error)


def end_batch_with(error: KafkaError) -> tuple[OffsetsRefused, BaseException]:
    producer = OffsetsRefused(error)
    delivery = ExactlyOnce(producer, Emitter(Sink(producer)))
    delivery.begin_batch()
    delivery.end_batch(lambda: [TopicPartition("raw", 0, 5)], Consumer())  # the commit runs in the background
    with pytest.raises(KafkaException) as caught:
        delivery.join()  # the next batch waits for it and gets its failure
    assert not delivery.in_transaction
    return producer, caught.value


@pytest.mark.parametrize(
    "error",
    [
        # What librdkafka 2.x reports when the group's generation moved on (seen in bench.chaos).
        KafkaError(KafkaError.ILLEGAL_GENERATION, "generation", txn_requires_abort=True),
        KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "member", txn_requires_abort=True),
        # A rebalance error even without librdkafka's abortable flag.
        KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "rebalance"),
        # Any other abortable error that is neither fenced nor fatal.
        KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, "coordinator", txn_requires_abort=True),
    ],
    ids=lambda e: e.name(),
)
def test_a_rebalance_during_the_commit_aborts_the_transaction_and_asks_for_a_rewind(error):
    producer, raised = end_batch_with(error)
    assert producer.calls[-2:] == ["offsets", "abort"]
    assert isinstance(raised, TransactionAborted)
    assert raised.args[0].code() == error.code()


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._FENCED, "fenced", txn_requires_abort=True),
        KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "epoch", txn_requires_abort=True),
        KafkaError(KafkaError.ILLEGAL_GENERATION, "generation", fatal=True, txn_requires_abort=True),
    ],
    ids=lambda e: e.name() + ("-fatal" if e.fatal() else ""),
)
def test_a_fenced_or_fatal_producer_is_not_rewound_the_runner_stops(error):
    producer, raised = end_batch_with(error)
    assert producer.calls[-1] == "abort"
    assert not isinstance(raised, TransactionAborted)


def test_a_fatal_error_that_needs_no_abort_is_raised_as_it_is():
    producer, raised = end_batch_with(KafkaError(KafkaError.PRODUCER_FENCED, "fenced", fatal=True))
    assert producer.calls[-1] == "offsets"  # nothing more is asked of a fatal producer
    assert not isinstance(raised, TransactionAborted)
