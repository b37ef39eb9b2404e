"""Ascend DB counter tables, named and scaled as the text export draws the same data.

msprof writes each hardware metric both as a DB table (``HBM``, ``LLC``, ``NPU_MEM``, …; bytes,
bytes/s, ns) and as counter events of ``trace_view.json`` / ``msprof_*.json`` (a process per metric,
events such as ``HBM 0/Read`` with ``{"Read(MB/s)": …}``). Each table here turns one DB row into the
``(event name, arg key, value)`` triples the text export writes for it, so that the DB and the text
export of one run give the same counter tracks with the same values. Columns are resolved as the
DB defines them: ``type``/``mode``/``component``/``eventName`` through ``STRING_IDS``, ``moduleId``
through ``ENUM_MODULE``; ids (``hbmId``, ``llcId``, ``accId``) become part of the name and are
never drawn as values. Tables the text export has no counters for (``NPU_MODULE_MEM``,
``NPU_OP_MEM``) are named after the CSV that holds them (``npu_module_mem.csv``,
``memory_record.csv``). The tracks are titled by :mod:`ascend_titles` from these names, as the text
export's are. :class:`CounterReading` is the DB reader's part that reads these tables.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

import msgspec

from tracemerge.core.model import Event, Kind, ThreadKey
from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import checked_ns
from tracemerge.sources.ascend.dirs import COUNTER_ORDER, OTHER_COUNTER_ORDER
from tracemerge.sources.ascend.titles import counter_title, retitled
from tracemerge.store.file_layout import FileLayout

KB = 1024
MB = 1024 * 1024  # msprof's DB stores MB/s × 1024 × 1024 as B/s, and the text export MB/s

Sample = tuple[str, str, Any]  # C event name, arg key, value
# Columns of counter tables (without a text-export naming) that identify a series rather than
# measure it: numeric ids (a number in the name), ids of an ENUM_* table, and STRING_IDS ids.
ID_KEYS = frozenset(
    {
        "hbmId",
        "llcId",
        "accId",
        "hbm_id",
        "llc_id",
        "acc_id",
        "nicId",
        "pcieId",
        "hccsId",
        "funcId",
        "coreId",
        "portId",
        "dieId",
    }
)
ENUM_KEYS = {"moduleId": "ENUM_MODULE", "module_id": "ENUM_MODULE"}
STRING_KEYS = frozenset({"type", "mode", "component", "operatorName", "eventName", "name"})
SERIES_KEYS = ID_KEYS | frozenset(ENUM_KEYS) | STRING_KEYS
NOT_VALUES = frozenset({"deviceId", "timestampNs", "globalTid", "streamPtr", "addr", *SERIES_KEYS})


class Names(Protocol):
    def text(self, value: Any) -> str:
        """A STRING_IDS id as its string."""
        ...

    def module(self, value: Any) -> str:
        """An ENUM_MODULE id as its name."""
        ...


class CounterTable(msgspec.Struct, frozen=True):
    process: str  # the text export's process, which names the counter track
    samples: Callable[[dict[str, Any], Names], Iterator[Sample]]


def _scaled(value: Any, unit: int) -> Any:
    return value / unit if _is_number(value) else None


def _is_number(value: Any) -> TypeGuard[int | float]:
    return type(value) in (int, float)


def _hbm(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    kind = names.text(row.get("type")).capitalize()  # read → Read
    yield f"HBM {row.get('hbmId')}/{kind}", f"{kind}(MB/s)", _scaled(row.get("bandwidth"), MB)


def _llc(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    counter = f"LLC {row.get('llcId')} {names.text(row.get('mode')).capitalize()}"
    # A percentage, as its key says (the text export writes the fraction: ascend_titles.percent).
    yield f"{counter}/Hit Rate", "Hit Rate(%)", row.get("hitRate")
    yield f"{counter}/Throughput", "Throughput(MB/s)", _scaled(row.get("throughput"), MB)


_NPU_MEM_KINDS = {"app": "APP", "device": "Device"}


def _npu_mem(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    kind = names.text(row.get("type"))
    kind = _NPU_MEM_KINDS.get(kind, kind)
    ddr, hbm = row.get("ddr"), row.get("hbm")
    yield f"{kind}/DDR", "KB", _scaled(ddr, KB)
    yield f"{kind}/HBM", "KB", _scaled(hbm, KB)
    yield f"{kind}/Memory", "KB", _scaled(ddr + hbm, KB) if _is_number(ddr) and _is_number(hbm) else None


def _aicore_freq(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    yield "AI Core Freq", "MHz", row.get("freq")


def _soc_bandwidth(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    yield "L2 Buffer Bw Level", "L2 Buffer Bw Level", row.get("l2BufferBwLevel")
    yield "Mata Bw Level", "Mata Bw Level", row.get("mataBwLevel")


_ACC_PMU_SERIES = {
    "readBwLevel": "read_bandwidth",
    "writeBwLevel": "write_band_width",  # sic, as the text export spells it
    "readOstLevel": "read_ost",
    "writeOstLevel": "write_ost",
}


def _acc_pmu(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    for column, series in _ACC_PMU_SERIES.items():
        yield f"acc_id {row.get('accId')}", series, row.get(column)


def _hccs(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    yield "Rx", "Rx(MB/s)", _scaled(row.get("rxThroughput"), MB)
    yield "Tx", "Tx(MB/s)", _scaled(row.get("txThroughput"), MB)


def _ddr(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    yield "DDR/Read", "Read(MB/s)", _scaled(row.get("read"), MB)
    yield "DDR/Write", "Write(MB/s)", _scaled(row.get("write"), MB)


def _pcie(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    # The text export draws the averages only: bandwidths in MB/s, the latency in µs.
    for kind in ("Cpl", "Nonpost"):
        yield f"PCIe_{kind.lower()}", "Tx", _scaled(row.get(f"tx{kind}Avg"), MB)
        yield f"PCIe_{kind.lower()}", "Rx", _scaled(row.get(f"rx{kind}Avg"), MB)
    yield "PCIe_nonpost_latency", "Tx", _scaled(row.get("txNonpostLatencyAvg"), 1000)
    yield "PCIe_nonpost_latency", "Rx", 0  # the text export has no receive latency and writes 0
    yield "PCIe_post", "Tx", _scaled(row.get("txPostAvg"), MB)
    yield "PCIe_post", "Rx", _scaled(row.get("rxPostAvg"), MB)


def _qos(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    die = row.get("dieId")
    series = f"die {die}" if _is_number(die) and die >= 0 else "value"
    yield f"QoS {names.text(row.get('eventName'))}", series, row.get("bandwidth")


def _npu_module_mem(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    yield names.module(row.get("moduleId")), "Total Reserved(MB)", _scaled(row.get("totalReserved"), MB)


def _npu_op_mem(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    component = names.text(row.get("component"))
    yield component, "Total Allocated(MB)", _scaled(row.get("totalAllocate"), MB)
    yield component, "Total Reserved(MB)", _scaled(row.get("totalReserve"), MB)


COUNTER_TABLES: dict[str, CounterTable] = {
    "HBM": CounterTable("HBM", _hbm),
    "LLC": CounterTable("LLC", _llc),
    "NPU_MEM": CounterTable("NPU MEM", _npu_mem),
    "AICORE_FREQ": CounterTable("AI Core Freq", _aicore_freq),
    "SOC_BANDWIDTH_LEVEL": CounterTable("Stars Soc Info", _soc_bandwidth),
    "ACC_PMU": CounterTable("Acc PMU", _acc_pmu),
    "HCCS": CounterTable("HCCS", _hccs),
    "DDR": CounterTable("DDR", _ddr),
    "PCIE": CounterTable("PCIe", _pcie),
    "QOS": CounterTable("QoS", _qos),
    "NPU_MODULE_MEM": CounterTable("NPU Module MEM", _npu_module_mem),
    "NPU_OP_MEM": CounterTable("NPU OP MEM", _npu_op_mem),
}


class CounterReading:
    """The counter tables of an Ascend DB, for its reader (:class:`ascend_db._DbReader`), whose
    ``tables``, ``layout``, ``dropped``, ``emit``, ``_dicts``, ``_track``, ``_enum`` and ``_text``
    these use. Every counter is titled whole (its thread is unnamed); when a title is drawn for
    several devices, every title leads with its device (``NPU 1 HBM 0 read (MB/s)``)."""

    modules: dict[int, str] | None = None  # ENUM_MODULE, read when first needed
    # The reader's (set by its __init__, the methods by its base DbRows):
    tables: dict[str, list[str]]
    layout: FileLayout
    dropped: Losses

    if TYPE_CHECKING:

        def emit(self, ev: Event) -> None: ...
        def _dicts(self, table: str) -> Iterator[dict[str, Any]]: ...
        def _text(self, value: Any) -> Any: ...
        def _enum(self, table: str) -> dict[Any, str]: ...
        def _track(self, key: ThreadKey, name: str, order: tuple) -> ThreadKey: ...

    def _counters(self, timeline: frozenset[str]) -> None:
        """Every table with a ``timestampNs`` column but the ``timeline`` ones: counter tracks."""
        for table, cols in sorted(self.tables.items()):
            if "timestampNs" not in cols or table in timeline:
                continue
            if table in COUNTER_TABLES:
                self._named_counters(table, COUNTER_TABLES[table])
            else:
                self._other_counters(table, cols)
        devices: dict[str, set] = defaultdict(set)
        for _, thread, title in self.layout.samples:
            if thread[0] == "counter":
                devices[title].add(thread[2])
        if any(len(found) > 1 for found in devices.values()):
            self.layout.samples = retitled(self.layout.samples, _on_device)

    def _named_counters(self, table: str, named: CounterTable) -> None:
        """A table the text export draws too (or keeps in a CSV), named and scaled as it draws it."""

        def samples(row: dict[str, Any]) -> Iterator[tuple[str, Any]]:
            return ((counter_title(named.process, name, key), value) for name, key, value in named.samples(row, self))

        per_row = self._operator_memory if table == "NPU_OP_MEM" else None
        self._counter_rows(table, named.process, COUNTER_ORDER, samples, per_row)

    def _operator_memory(self, row: dict[str, Any], ts: int, device: int) -> None:
        """An operator's allocation or release: the totals are counters, the operator an instant."""
        key = self._track(("operator memory", device), "NPU OP MEM", (COUNTER_ORDER, "NPU OP MEM", device, "operators"))
        args = {"type": self.text(row.get("type")), "size": row.get("size"), "addr": row.get("addr")}
        self.emit(Event(Kind.INSTANT, ts, key, self.text(row.get("operatorName")), "", 0, args))

    def _other_counters(self, table: str, cols: list[str]) -> None:
        """A table the text export has no counters for: one series per numeric column."""
        label = table.replace("_", " ")
        keys = [c for c in cols if c in SERIES_KEYS]
        values = [c for c in cols if c not in NOT_VALUES]
        enums = {k: self._enum(ENUM_KEYS[k]) for k in keys if k in ENUM_KEYS}

        def samples(row: dict[str, Any]) -> Iterator[tuple[str, Any]]:
            series = " ".join(self._series_part(k, row[k], enums) for k in keys)
            return ((" ".join(part for part in (label, series, col) if part), row.get(col)) for col in values)

        self._counter_rows(table, label, OTHER_COUNTER_ORDER, samples)

    def _counter_rows(
        self,
        table: str,
        process: str,
        order: int,
        samples: Callable[[dict[str, Any]], Iterable[tuple[str, Any]]],
        per_row: Callable[[dict[str, Any], int, int], None] | None = None,
    ) -> None:
        """Each row's counter values, titled by ``samples``, on the device's track of ``process``."""
        for row in self._dicts(table):
            ts = self._counter_time(row, table)
            if ts is None:
                continue
            device = row.get("deviceId") or 0
            thread = self._track(("counter", process, device), "", (order, process, device, ""))
            for name, value in samples(row):
                if type(value) not in (int, float):
                    self.dropped.add(Stat.COUNTER_WITHOUT_VALUE, 1, "counter row without a numeric value")
                    continue
                self.emit(Event(Kind.COUNTER, ts, thread, name, "", value=value))
            if per_row is not None:
                per_row(row, ts, device)

    def _counter_time(self, row: dict[str, Any], table: str) -> int | None:
        try:
            return checked_ns(int(row["timestampNs"]))
        except (TypeError, ValueError):
            self.dropped.add(Stat.EVENT_TIME_UNREADABLE, 1, f"{table} row with unreadable times")
            return None

    def _series_part(self, key: str, value: Any, enums: dict[str, dict[int, str]]) -> str:
        """How a series column reads in a track name: an id as its number, an enum by its name."""
        if key in ID_KEYS:
            return str(value)
        if key in enums:
            return str(enums[key].get(value, value))
        return str(self._text(value))

    # -- how the exporter defines each column (Names) ----------------------------------------------

    def text(self, value: Any) -> str:
        return str(self._text(value))

    def module(self, value: Any) -> str:
        if self.modules is None:
            self.modules = self._enum("ENUM_MODULE")
        return str(self.modules.get(value, value))


def _on_device(thread: tuple, title: str) -> str:
    """A counter's title in a DB of several devices: its device first."""
    return f"NPU {thread[2]} {title}" if thread[0] == "counter" else title


def counter_group(thread: tuple) -> str:
    """What a counter thread of the DB reader holds: the text export's process, or the table."""
    return str(thread[1]) if thread[0] == "counter" else str(thread)
