"""IBM i journal replay: commitment control, record images, rollback images as undo, DLQ cases."""

import json

import pytest

from processor.core import events
from processor.sources.ibmi import IbmiMapper
from processor.sources.replay import SourceRow, map_rows, read_rows
from processor.testing.reference import ReferenceModel

from ..sourcekit import DATA, KEEP, table_state


def run(entries, mapper=None):
    src = [SourceRow(i + 1, r, json.dumps(r).encode()) for i, r in enumerate(entries)]
    outs = list(map_rows(src, mapper or IbmiMapper()))
    return [o.event for o in outs if o.event], [(o.source.line, o.reason) for o in outs if o.event is None]


def entry(seq, code, entt, ccid=0, rrn=None, data=None, obj="ITEMS", lib="SHOP", **extra):
    e = {
        "sequence": seq,
        "code": code,
        "entry_type": entt,
        "commit_cycle": ccid,
        "object": obj,
        "library": lib,
        "rrn": rrn,
        "data": data,
        "user": "U1",
        "job": "1/U1/J",
    }
    e.update(extra)
    return e


def feed(evs):
    model = ReferenceModel()
    for offset, e in enumerate(evs):
        model.feed(0, offset, events.encode_raw(e))
    return model


def test_sample_file_maps_to_the_expected_events_and_dead_letters():
    expected = json.loads((DATA / "ibmi_journal.expected.json").read_text())
    outs = list(map_rows(read_rows(DATA / "ibmi_journal.jsonl"), IbmiMapper()))
    assert [{k: o.event[k] for k in KEEP} for o in outs if o.event] == expected["events"]
    assert [{"line": o.source.line, "reason": o.reason} for o in outs if o.event is None] == expected["dlq"]


def test_sample_file_replayed_through_the_reference_model_gives_the_tables():
    expected = json.loads((DATA / "ibmi_journal.expected.json").read_text())
    evs = [o.event for o in map_rows(read_rows(DATA / "ibmi_journal.jsonl"), IbmiMapper()) if o.event]
    model = feed(evs)
    assert model.dlq == []
    state = table_state(model)
    for table, rows in expected["tables"].items():
        assert state.get(table, {}) == {json.dumps({"ID": r["ID"]}): r for r in rows}, table
    assert model.outcomes(0)["C101"] == "rolled_back"


def test_commitment_control_sc_cm_rb():
    evs, dlq = run(
        [
            entry(1, "C", "SC", 5),
            entry(2, "R", "PT", 5, rrn=1, data={"ID": 1}),
            entry(3, "C", "CM", 5),
            entry(4, "C", "SC", 6),
            entry(5, "R", "PT", 6, rrn=2, data={"ID": 2}),
            entry(6, "C", "RB", 6),
        ]
    )
    assert dlq == []
    assert [(e["xid"], e["op"], e["seq"], e["scn"]) for e in evs] == [
        ("C5", "BEGIN", 0, 1),
        ("C5", "INSERT", 1, 2),
        ("C5", "COMMIT", 2, 3),
        ("C6", "BEGIN", 0, 4),
        ("C6", "INSERT", 1, 5),
        ("C6", "ROLLBACK", 2, 6),
    ]
    assert evs[1]["table"] == "SHOP.ITEMS" and evs[1]["key"] == {"ID": 1} and evs[1]["row_id"] == "1"
    assert evs[1]["attrs"]["journal_code"] == "R" and evs[1]["attrs"]["entry_type"] == "PT"


def test_pt_and_px_insert_dl_delete():
    evs, _ = run(
        [
            entry(1, "R", "PT", 5, rrn=1, data={"ID": 1, "N": "a"}),
            entry(2, "R", "PX", 5, rrn=9, data={"ID": 9}),
            entry(3, "R", "DL", 5, rrn=1, data={"ID": 1, "N": "a"}),
        ]
    )
    assert [(e["op"], e["key"], e["before"], e["after"]) for e in evs] == [
        ("INSERT", {"ID": 1}, None, {"ID": 1, "N": "a"}),
        ("INSERT", {"ID": 9}, None, {"ID": 9}),
        ("DELETE", {"ID": 1}, {"ID": 1, "N": "a"}, None),
    ]


def test_ub_up_pair_is_one_update_with_before_and_after():
    evs, _ = run(
        [entry(1, "R", "UB", 5, rrn=1, data={"ID": 1, "Q": 1}), entry(2, "R", "UP", 5, rrn=1, data={"ID": 1, "Q": 2})]
    )
    assert len(evs) == 1
    assert (evs[0]["op"], evs[0]["before"], evs[0]["after"], evs[0]["scn"]) == (
        "UPDATE",
        {"ID": 1, "Q": 1},
        {"ID": 1, "Q": 2},
        2,
    )


def test_up_without_before_image_is_an_update_without_before():
    evs, _ = run([entry(1, "R", "UP", 5, rrn=1, data={"ID": 1, "Q": 2})])
    assert (evs[0]["op"], evs[0]["before"], evs[0]["after"]) == ("UPDATE", None, {"ID": 1, "Q": 2})


def test_rollback_to_savepoint_images_undo_the_changes_they_reverse():
    evs, dlq = run(
        [
            entry(1, "C", "SC", 7),
            entry(2, "R", "PT", 7, rrn=1, data={"ID": 1, "Q": 1}),
            entry(3, "C", "SB", 7),  # savepoint
            entry(4, "R", "UB", 7, rrn=1, data={"ID": 1, "Q": 1}),
            entry(5, "R", "UP", 7, rrn=1, data={"ID": 1, "Q": 2}),
            entry(6, "R", "PT", 7, rrn=2, data={"ID": 2, "Q": 9}),
            # ROLLBACK TO SAVEPOINT: the system reverses the changes, newest first
            entry(7, "R", "DR", 7, rrn=2, data={"ID": 2, "Q": 9}),
            entry(8, "R", "BR", 7, rrn=1, data={"ID": 1, "Q": 2}),
            entry(9, "R", "UR", 7, rrn=1, data={"ID": 1, "Q": 1}),
            entry(10, "C", "SU", 7),
            entry(11, "C", "CM", 7),
        ]
    )
    assert dlq == []
    undo = [e for e in evs if e["undo"]]
    assert [(e["op"], e["row_id"], e["before"], e["after"]) for e in undo] == [
        ("DELETE", "2", {"ID": 2, "Q": 9}, None),
        ("UPDATE", "1", {"ID": 1, "Q": 2}, {"ID": 1, "Q": 1}),
    ]
    [txn] = feed(evs).all_committed()
    assert [(c["op"], c["after"]) for c in txn.changes] == [("c", {"ID": 1, "Q": 1})]


def test_commit_cycle_zero_is_committed_immediately_with_a_synthetic_xid():
    evs, _ = run(
        [
            entry(41, "R", "PT", 0, rrn=3, data={"ID": 3}),
            entry(42, "R", "UB", 0, rrn=3, data={"ID": 3, "Q": 0}),
            entry(43, "R", "UP", 0, rrn=3, data={"ID": 3, "Q": 1}),
        ]
    )
    assert [(e["xid"], e["op"], e["seq"], e["scn"]) for e in evs] == [
        ("J41", "BEGIN", 0, 41),
        ("J41", "INSERT", 1, 41),
        ("J41", "COMMIT", 2, 41),
        ("J43", "BEGIN", 0, 43),
        ("J43", "UPDATE", 1, 43),
        ("J43", "COMMIT", 2, 43),
    ]
    assert len(feed(evs).all_committed()) == 2


def test_member_cleared_is_a_truncate_and_bookkeeping_entries_are_ignored():
    mapper = IbmiMapper()
    evs, dlq = run(
        [
            entry(1, "F", "CR", 5, obj="TMP"),
            entry(2, "J", "NR", obj="JRN"),
            entry(3, "D", "CT", obj="NEW"),
            entry(4, "C", "SB", 5),
            entry(5, "C", "SQ", 5),
        ],
        mapper,
    )
    assert dlq == []
    assert [(e["op"], e["table"]) for e in evs] == [("TRUNCATE", "SHOP.TMP")]
    assert mapper.stats["ignored_J_NR"] == mapper.stats["ignored_D_CT"] == 1


def test_unpaired_before_image_is_not_lost():
    evs, _ = run([entry(1, "R", "UB", 5, rrn=1, data={"ID": 1, "Q": 1}), entry(2, "C", "CM", 5)])
    assert [e["op"] for e in evs] == ["UPDATE", "COMMIT"]


def test_key_falls_back_to_rrn_and_can_be_configured():
    evs, _ = run([entry(1, "R", "PT", 5, rrn=12, data={"SKU": "x"})])
    assert evs[0]["key"] == {"RRN": 12}
    evs, _ = run([entry(1, "R", "PT", 5, rrn=12, data={"SKU": "x"})], IbmiMapper({"SHOP.ITEMS": ["SKU"]}))
    assert evs[0]["key"] == {"SKU": "x"}


def test_outfile_column_names_are_accepted():
    evs, _ = run(
        [
            {
                "JOSEQN": 1,
                "JOCODE": "R",
                "JOENTT": "PT",
                "JOCCID": 3,
                "JOOBJ": "ITEMS",
                "JOLIB": "SHOP",
                "JOCTRR": 4,
                "JOESD": json.dumps({"ID": 4}),
                "JOTSTP": "2024-03-01-10.00.01.000000",
                "JOUSER": "U",
            }
        ]
    )
    assert (evs[0]["xid"], evs[0]["after"], evs[0]["user"], evs[0]["ts_ms"]) == ("C3", {"ID": 4}, "U", 1709287201000)


@pytest.mark.parametrize(
    "bad, reason",
    [
        (entry(1, "R", "ZZ", 5, rrn=1, data={"ID": 1}), "unknown record entry R/ZZ"),
        (entry(1, "C", "XX", 5), "unknown commitment control entry C/XX"),
        (entry(1, "C", "CM", 0), "C/CM with commit cycle 0"),
        (entry(1, "R", "PT", 5, rrn=1, data="{not json"), "JOESD is not JSON"),
        (entry(1, "R", "PT", 5, rrn=1, data="[1, 2]"), "JOESD is not a JSON object"),
        (entry(1, "R", "DR", 5, rrn=None, data={"ID": 1}), "rollback image R/DR without JOCTRR"),
        (entry(1, "R", "DR", 0, rrn=1, data={"ID": 1}), "rollback image R/DR outside commitment control"),
        (entry("x", "R", "PT", 5, rrn=1, data={"ID": 1}), "JOSEQN is not an integer"),
        (entry(1, "RR", "PT", 5), "bad journal code/entry type"),
        (entry(1, "R", "PT", 5, rrn=1, data={"ID": 1}, object=None), "journal entry without JOOBJ"),
    ],
)
def test_bad_entries_go_to_the_dlq_and_the_replay_continues(bad, reason):
    evs, dlq = run([bad, entry(2, "C", "SC", 9), entry(3, "C", "CM", 9)])
    assert len(dlq) == 1 and dlq[0][0] == 1 and dlq[0][1].startswith(reason)
    assert [e["op"] for e in evs] == ["BEGIN", "COMMIT"]
