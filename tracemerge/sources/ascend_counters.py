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
``memory_record.csv``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

KB = 1024
MB = 1024 * 1024  # msprof's DB stores MB/s × 1024 × 1024 as B/s, and the text export MB/s

Sample = tuple[str, str, Any]  # C event name, arg key, value


class Names(Protocol):
    def text(self, value: Any) -> str:
        """A STRING_IDS id as its string."""
        ...

    def module(self, value: Any) -> str:
        """An ENUM_MODULE id as its name."""
        ...


@dataclass(frozen=True)
class CounterTable:
    process: str  # the text export's process, which names the counter track
    samples: Callable[[dict[str, Any], Names], Iterator[Sample]]


def _scaled(value: Any, unit: int) -> Any:
    return value / unit if _is_number(value) else None


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _hbm(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    kind = names.text(row.get("type")).capitalize()  # read → Read
    yield f"HBM {row.get('hbmId')}/{kind}", f"{kind}(MB/s)", _scaled(row.get("bandwidth"), MB)


def _llc(row: dict[str, Any], names: Names) -> Iterator[Sample]:
    counter = f"LLC {row.get('llcId')} {names.text(row.get('mode')).capitalize()}"
    hit_rate = row.get("hitRate")
    yield f"{counter}/Hit Rate", "Hit Rate(%)", hit_rate / 100 if _is_number(hit_rate) else None
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
