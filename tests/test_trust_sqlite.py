"""SQLite inputs: a name in a DB's schema is a name, never SQL; every query is bounded and stoppable."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from readback import read_pftrace

from tracemerge.core.errors import Stopped
from tracemerge.pipeline import merge
from tracemerge.sources.sqlite import guard as sqlite_guard

ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r) SELECT x FROM r"
# Spliced into `select ... from "{table}"`, this name would join the table with an endless query.
BREAKS_OUT = f'AICORE_FREQ" JOIN ({ENDLESS}) AS "z'
TS = 1_767_225_600_000_000_000


def _db_run(tmp_path: Path, table: str, columns: tuple[str, ...] = ("deviceId", "timestampNs", "freq")) -> Path:
    """The Ascend DB fixture with one more counter table, of that name and columns, and one row."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run)
    [db] = run.rglob("*.db")
    names = ", ".join(sqlite_guard.quote(c) for c in columns)
    with sqlite3.connect(db) as con:
        con.execute(f"create table {sqlite_guard.quote(table)} ({names})")
        values = [0 if c == "deviceId" else TS if c == "timestampNs" else 7 for c in columns]
        con.execute(f"insert into {sqlite_guard.quote(table)} values ({', '.join('?' * len(columns))})", values)
    con.close()
    return run


def _counter_names(out: Path) -> set[str]:
    return {name for _, name in read_pftrace(out).counter_tracks.values()}


def test_a_table_name_that_is_sql_is_read_as_a_name(tmp_path: Path) -> None:
    run = _db_run(tmp_path, BREAKS_OUT)
    out = tmp_path / "out.pftrace"
    # A subprocess: before names were quoted, this query never ended and no signal stopped it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracemerge", str(run), "-o", str(out), "-q"], stderr=subprocess.PIPE
    )
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert [n for n in _counter_names(out) if "WITH RECURSIVE" in n and n.endswith("freq")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pftrace", "run"]


@pytest.mark.parametrize(
    ("table", "columns"),
    [
        ('NPU"MEM', ("deviceId", "timestampNs", "freq")),
        ("NPU'MEM", ("deviceId", "timestampNs", "freq")),
        ("NPU_MEM2", ("deviceId", "timestampNs", 'fr"eq')),
        ("NPU_MEM3", ("deviceId", "timestampNs", "fr'eq")),
        ("a'); drop table TASK; --", ("deviceId", "timestampNs", "x\"'y")),
    ],
)
def test_quotes_in_table_or_column_names_never_lose_the_database(
    tmp_path: Path, table: str, columns: tuple[str, ...]
) -> None:
    before = merge([FIXTURES / "ascend" / "db"], tmp_path / "before.pftrace")
    out = tmp_path / "out.pftrace"
    report = merge([_db_run(tmp_path, table, columns)], out)
    assert report.skipped == [] and report.exit_code == 0
    assert report.read.slices == before.read.slices  # the rest of the DB is read as before
    assert report.read.counters == before.read.counters + 1
    assert any(n.endswith(columns[-1]) for n in _counter_names(out))


def test_a_query_past_its_budget_skips_the_file_with_the_reason(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sqlite_guard, "MIN_STEPS", 0)
    monkeypatch.setattr(sqlite_guard, "STEPS_PER_BYTE", 0)
    monkeypatch.setattr(sqlite_guard, "CHECK_EVERY", 1)
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run / "npu")
    shutil.copytree(FIXTURES / "kineto_gpu", run / "gpu")
    report = merge([run], tmp_path / "out.pftrace")
    [skipped] = report.skipped
    assert "ascend_pytorch_profiler_0.db: reading it took more than 0 SQLite steps" in skipped
    assert report.exit_code == 3 and report.read.slices > 0


def test_every_query_has_a_budget_that_grows_with_the_file() -> None:
    con = sqlite3.connect(":memory:")
    started = time.monotonic()
    with pytest.raises(Exception, match="took more than") as err, sqlite_guard.guarded(con, "x.db", 1000):
        con.execute(f"select count(*) from ({ENDLESS})").fetchone()
    assert type(err.value).__name__ == "InputError"
    assert time.monotonic() - started < 30
    assert sqlite_guard.Budget(1 << 20).steps == sqlite_guard.MIN_STEPS + sqlite_guard.STEPS_PER_BYTE * (1 << 20)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_query_under_way(sig: signal.Signals) -> None:
    """SQLite swallows the exception a signal handler raises in its progress callback; the guard
    raises it again, so a run stops at once whatever query it is in."""
    previous = signal.signal(sig, Stopped.on_signal)
    con = sqlite3.connect(":memory:")
    timer = threading.Timer(0.3, lambda: signal.raise_signal(sig))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(Stopped) as stopped, sqlite_guard.guarded(con, "x.db", 10**12):
            con.execute(f"select count(*) from ({ENDLESS})").fetchone()
    finally:
        timer.cancel()
        signal.signal(sig, previous)
        Stopped.pending = None
    assert stopped.value.signum == sig
    assert time.monotonic() - started < 10


# -- side files and values: what is not real costs nothing, one bad value costs that value ---------------

NSYS_EXPORT = FIXTURES / "nsys" / "torchrun" / "train_2gpu.sqlite"


@pytest.mark.parametrize(
    ("suffix", "content"),
    [("-journal", None), ("-wal", None), ("-wal", b"\x37\x7f\x06\x82" + b"\x00" * 28), ("-journal", b"junk")],
    ids=["1 GiB of zeros as a journal", "1 GiB of zeros as a WAL", "a WAL header without a frame", "junk"],
)
def test_a_side_file_that_holds_nothing_to_replay_is_neither_copied_nor_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, content: bytes | None
) -> None:
    """``truncate -s 1G X.sqlite-journal`` beside an export: no hot journal (SQLite ignores it too),
    so the export is opened in place, its step budget is its own size's, and nothing is copied."""
    from tracemerge.sources.sqlite import opening

    db = tmp_path / "in" / NSYS_EXPORT.name
    db.parent.mkdir()
    shutil.copyfile(NSYS_EXPORT, db)
    side = db.with_name(db.name + suffix)
    with side.open("wb") as file:
        if content is None:
            file.truncate(1 << 30)  # sparse: a gigabyte of zeros that takes no disk
        else:
            file.write(content)
    budgets: list[int] = []
    real_budget = sqlite_guard.Budget
    monkeypatch.setattr(sqlite_guard, "Budget", lambda size: budgets.append(size) or real_budget(size))
    monkeypatch.setattr(opening.shutil, "copyfile", lambda *a: pytest.fail(f"copied {a}"))
    report = merge([db], tmp_path / "out.pftrace")
    assert report.skipped == [] and report.written.slices == 144
    assert budgets == [NSYS_EXPORT.stat().st_size]


def test_string_ids_without_a_primary_key_cost_a_lookup_per_name_not_a_scan(tmp_path: Path) -> None:
    """An export whose StringIds has no primary key, 20,000 strings and 2,000 ranges each naming
    its own: a scan per name would need about 2·10⁸ SQLite steps, far past the file's budget."""
    db = tmp_path / "in" / "no_key.sqlite"
    db.parent.mkdir()
    shutil.copyfile(NSYS_EXPORT, db)
    thread = (1 << 48) | (301 << 24) | 301
    with sqlite3.connect(db) as con:
        con.execute("create table S (id INTEGER, value TEXT)")
        con.execute("insert into S select id, value from StringIds")
        con.execute("drop table StringIds")
        con.execute("alter table S rename to StringIds")
        con.executemany("insert into StringIds values (?, ?)", ((10**6 + i, f"range {i}") for i in range(20_000)))
        con.executemany(
            "insert into NVTX_EVENTS (start, end, eventType, textId, globalTid, domainId) values (?, ?, 59, ?, ?, 0)",
            ((10**7 + i * 10, 10**7 + i * 10 + 5, 10**6 + i * 10, thread) for i in range(2_000)),
        )
    con.close()
    assert 64 * db.stat().st_size + sqlite_guard.MIN_STEPS < 2e8
    report = merge([db], tmp_path / "out.pftrace")
    assert report.skipped == [] and report.written.slices == 144 + 2_000
    names = {s.name for s in read_pftrace(tmp_path / "out.pftrace").slices}
    assert {"range 0", "range 19990"} <= names and "range 5" not in names


def test_an_ascend_string_that_is_not_utf8_is_read_with_a_replacement_character(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run)
    [db] = run.rglob("*.db")
    with sqlite3.connect(db) as con:
        [(sid, value)] = con.execute("select id, value from STRING_IDS where value = 'MatMulV2'").fetchall()
        con.execute("update STRING_IDS set value = cast(? as text) where id = ?", (b"MatMul\xffV2", sid))
    con.close()
    before = merge([FIXTURES / "ascend" / "db"], tmp_path / "before.pftrace")
    report = merge([run], tmp_path / "out.pftrace")
    assert report.skipped == [] and report.written == before.written
    names = [s.name for s in read_pftrace(tmp_path / "out.pftrace").slices]
    assert "MatMul\ufffdV2" in names and value not in names
    assert report.as_dict()["stats"]["db_text_not_utf8"]["count"] == 1


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_an_infinite_time_in_an_ascend_db_costs_that_event(tmp_path: Path, value: float) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "ascend" / "db", run)
    [db] = run.rglob("*.db")
    with sqlite3.connect(db) as con:
        con.execute("update TASK set startNs = ? where rowid = (select min(rowid) from TASK)", (value,))
    con.close()
    before = merge([FIXTURES / "ascend" / "db"], tmp_path / "before.pftrace")
    report = merge([run], tmp_path / "out.pftrace")
    assert report.skipped == [] and report.written.slices == before.written.slices - 1
    assert report.as_dict()["stats"]["event_time_unreadable"]["count"] == 1
