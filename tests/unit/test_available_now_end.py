"""--available-now in a group: a member whose own partitions are done commits their offsets at once
(on_own_done), then waits for the others' commits, asked for every ELSEWHERE_CHECK_S."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import TopicPartition

from processor.runtime import available_now
from processor.runtime.available_now import ELSEWHERE_CHECK_S, AvailableNow


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Consumer:
    def __init__(self):
        self.committed_offsets: dict[int, int] = {}
        self.asked = 0

    def position(self, tps):
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in tps]  # no record past the engine's

    def committed(self, tps, timeout=None):
        self.asked += 1
        return [TopicPartition(tp.topic, tp.partition, self.committed_offsets.get(tp.partition, -1001)) for tp in tps]


def member(monkeypatch, held: dict[int, int]):
    clock = Clock()
    monkeypatch.setattr(available_now.time, "monotonic", clock)
    monkeypatch.setattr(available_now, "end_offsets", lambda _client, _topic: {0: 10, 1: 20})
    states = {p: SimpleNamespace(engine=SimpleNamespace(next_offset=n)) for p, n in held.items()}
    partitions = SimpleNamespace(held=states, to_resume=[], last_rebalance=clock.now)
    dispatcher = SimpleNamespace(release_all_held=lambda: None, emitter=SimpleNamespace(queue=[]))
    consumer = Consumer()
    finish = AvailableNow(None, "raw", consumer, partitions, dispatcher)
    return finish, states, consumer, clock


def test_own_partitions_done_commit_once_then_the_others_are_asked_for_often(monkeypatch):
    finish, states, consumer, clock = member(monkeypatch, {0: 4})
    commits = []
    finish.on_own_done = lambda: commits.append(clock.now)
    assert not finish.reached() and commits == []  # partition 0 is at 4 of 10
    states[0].engine.next_offset = 10
    assert not finish.reached()  # partition 1 (another member's) is not committed at its target
    assert commits == [clock.now]  # ours were committed before waiting for theirs
    clock.now += ELSEWHERE_CHECK_S / 2
    assert not finish.reached() and consumer.asked == 1  # asked at most every ELSEWHERE_CHECK_S
    consumer.committed_offsets[1] = 20
    clock.now += ELSEWHERE_CHECK_S
    assert finish.reached() and consumer.asked == 2
    assert len(commits) == 1  # once while the held partitions stay the same


def test_partitions_taken_over_at_the_end_commit_again(monkeypatch):
    finish, states, _consumer, _clock = member(monkeypatch, {0: 10})
    commits = []
    finish.on_own_done = lambda: commits.append(sorted(states))
    assert not finish.reached()
    states[1] = SimpleNamespace(engine=SimpleNamespace(next_offset=20))  # the other member left
    assert finish.reached()
    assert commits == [[0], [0, 1]]
