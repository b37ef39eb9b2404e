"""The Ascend DB reader's joins (tracemerge.sources.ascend.db_links): integer columns that answer
as the dict of lists they replace, whatever is added; and the reader's flows through them."""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import FIXTURES

from tracemerge.core.stats import Stat
from tracemerge.pipeline import merge
from tracemerge.sources.ascend.db_links import Groups, Once

RUN = "host_101_20260101000000000_ascend_pt"


def _values(groups: Groups, key: object) -> list[tuple]:
    found = groups.find(key)
    return [] if found is None else found[1]


def _reference(pairs: list[tuple]) -> dict:
    found: defaultdict = defaultdict(list)
    for key, *values in pairs:
        found[key].append(tuple(values))
    return found


@pytest.mark.parametrize("odd", [None, 2**63, "text", 7.5, -(2**63) - 1])
def test_groups_answer_as_a_dict_of_lists(odd: object) -> None:
    """Keys and values in any order, repeated keys keeping the order added; one key or value that
    is not an int64 (NULL, beyond 64 bits, text, a fraction) anywhere turns the map into a dict."""
    rng = random.Random(11)
    pairs = [(rng.randrange(-50, 50), rng.randrange(10**12), rng.randrange(5)) for _ in range(2_000)]
    if odd is not None:
        pairs.insert(700, (odd, 1, 2))
        pairs.insert(900, (3, odd, 2))
    groups = Groups(2)
    for pair in pairs:
        groups.add(*pair)
    groups.seal()
    assert groups.by_dict == (odd is not None)
    truth = _reference(pairs)
    for key in [*range(-60, 60), odd, 10**30, "x", None]:
        assert _values(groups, key) == truth.get(key, []), key
        assert (groups.find(key) is None) == (key not in truth)
    # a key equal to an int as a dict key is one (5.0, True): looked up as that int
    assert _values(groups, 5.0) == truth.get(5, []) and _values(groups, True) == truth.get(1, [])
    assert _values(groups, 5.5) == []


def test_once_takes_each_key_once_however_it_is_spelt() -> None:
    for by_dict in (False, True):
        groups = Groups(1)
        for key in (4, 9, 4, 2):
            groups.add(key, key * 10)
        if by_dict:
            groups.add(None, 0)
        groups.seal()
        once = Once(groups)
        taken = []
        for key in (4, 9, 4.0, 2, 9, True, 2):
            found = groups.find(key)
            if found is not None:
                taken.append((key, once.take(key, found[0])))
        assert taken == [(4, True), (9, True), (4.0, False), (2, True), (9, False), (2, False)], by_dict


def _db_copy(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run)
    [db] = run.rglob("*.db")
    return run, db


def test_db_flows_through_connection_ids_null_text_and_shared(tmp_path: Path) -> None:
    """A CONNECTION_IDS row whose connectionId is NULL or text draws no flow (counted, the rest of
    the DB read); a second PYTORCH_API row naming a link id already followed links nothing again
    (counted); a new link id to a connection with two tasks draws a torch_to_npu flow to each."""
    run, db = _db_copy(tmp_path)
    before = merge([run], tmp_path / "before.pftrace")
    assert before.written.flows == 5 and before.dropped == {}
    with sqlite3.connect(db) as con:
        con.executemany("insert into CONNECTION_IDS values (?, ?)", [(10002, None), (10002, "abc"), (10003, 2002)])
        cols = [r[1] for r in con.execute("pragma table_info(PYTORCH_API)")]
        row = dict(
            zip(cols, con.execute("select * from PYTORCH_API where connectionId = 10002").fetchone(), strict=True)
        )
        for link_id, start in ((10002, "1767225600000130000"), (10003, "1767225600000140000")):
            values = {**row, "connectionId": link_id, "startNs": start, "endNs": str(int(start) + 5_000)}
            con.execute(f"insert into PYTORCH_API values ({','.join('?' * len(cols))})", [values[c] for c in cols])
    report = merge([run], tmp_path / "out.pftrace")
    assert report.written.flows == 5 + 2  # connection 2002 has two tasks
    assert report.written.slices == before.written.slices + 2
    assert report.dropped == {
        "CONNECTION_IDS row whose connectionId is NULL or text": 2,
        "PYTORCH_API row sharing a connectionId with an earlier one (not linked again)": 1,
    }
    assert report.stats.count(Stat.LINK_UNREADABLE) == 2 and report.stats.count(Stat.CONNECTION_SHARED) == 1
    assert report.exit_code == 3  # two links of the input are not drawn


def _tables(db: Path) -> dict[str, list[str]]:
    """Each table's columns that may hold any value (an INTEGER PRIMARY KEY holds integers only)."""
    with sqlite3.connect(db) as con:
        names = [t for (t,) in con.execute("select name from sqlite_master where type = 'table'")]
        return {
            t: [
                name
                for _, name, kind, _, _, pk in con.execute(f'pragma table_info("{t}")')
                if not (pk and kind == "INTEGER")
            ]
            for t in names
        }


def test_any_value_in_any_column_loses_that_row_at_most(tmp_path: Path) -> None:
    """Text, a fraction or NULL in any column of the first row of any table: the DB is read, never
    skipped whole; a row whose device, thread or plane id is not an integer is counted and not drawn."""
    _, db = _db_copy(tmp_path / "probe")
    cases = [(t, c, v) for t, cols in _tables(db).items() for c in cols for v in ("x", -1.5, None)]
    assert len(cases) == 195
    unreadable = []
    for n, (table, column, value) in enumerate(cases):
        run, db = _db_copy(tmp_path / str(n))
        with sqlite3.connect(db) as con:
            con.execute(
                f'update "{table}" set "{column}" = ? where rowid = (select min(rowid) from "{table}")', (value,)
            )
        report = merge([run], tmp_path / str(n) / "out.pftrace")
        assert not report.skipped, (table, column, value, report.skipped)
        if report.stats.count(Stat.DB_ID_UNREADABLE):
            unreadable.append((table, column, value))
            assert report.dropped[f"{table} row whose {column} is not an integer"] == 1
    assert unreadable == [
        (table, column, value)
        for table, column in (
            ("RANK_DEVICE_MAP", "deviceId"),
            ("TASK", "deviceId"),
            ("COMMUNICATION_TASK_INFO", "planeId"),
            ("CANN_API", "globalTid"),
            ("PYTORCH_API", "globalTid"),
            ("OVERLAP_ANALYSIS", "deviceId"),
        )
        for value in ("x", -1.5)
    ]


def test_a_task_with_a_text_device_id_is_counted_and_the_rest_drawn(tmp_path: Path) -> None:
    run, db = _db_copy(tmp_path)
    before = merge([run], tmp_path / "before.pftrace")
    with sqlite3.connect(db) as con:
        con.execute("update TASK set deviceId = 'npu0' where rowid = (select min(rowid) from TASK)")
    report = merge([run], tmp_path / "out.pftrace")
    assert report.written.slices == before.written.slices - 1  # a compute task: drawn on its stream only
    assert report.written.flows == before.written.flows - 1  # its torch_to_npu flow has no task to go to
    assert report.dropped == {"TASK row whose deviceId is not an integer": 1}
    assert report.exit_code == 3
