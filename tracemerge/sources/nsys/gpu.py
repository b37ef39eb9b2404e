"""The device side of an Nsight Systems export (:mod:`tracemerge.sources.nsys.tables` reads the
host side and names the tracks): GPU work on its streams, synchronizations, CUDA events and GPU
metrics, each row handed to the file's layout as it is fetched (the tables of one stream merged by
start time).

- ``CUPTI_ACTIVITY_KIND_KERNEL``, ``_MEMCPY``, ``_MEMSET``: slices on ``GPU <d> stream <s>``, named as
  Kineto names them (kernels by their demangled name, ``Memcpy HtoD (Pageable -> Device)``,
  ``Memset (Device)``), each the end of the ``ac2g`` flow from the runtime call that launched it
  when that call is in the export (same process and ``correlationId``);
- ``_SYNCHRONIZATION`` on ``GPU <d> stream <s> sync`` (``GPU <d> sync`` for a whole context). Its
  ``deviceId`` is not the GPU's (CUPTI records none for a synchronization): the device is the one
  the context's other work ran on;
- ``_CUDA_EVENT``: an instant on the stream where the device completed the event (its GPU, too,
  the one its context's work ran on);
- ``GPU_METRICS`` (named by ``TARGET_INFO_GPU_METRICS``; the GPU is the low byte of ``typeId``):
  counters ``GPU <d>: <metric>`` in the process of the rank that used that GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracemerge.core.model import FlowPhase, OriginKey, ThreadKey
from tracemerge.core.stats import Stat
from tracemerge.evidence.anchors import DEVICE_COMPUTE, device_tag
from tracemerge.sources.nsys.schema import (
    CUDA_EVENT,
    GPU_METRICS,
    KERNEL,
    MEMCPY,
    MEMSET,
    SYNC,
    Source,
    present,
    times_ok,
)
from tracemerge.sources.nsys.tables import NO_EVENT, NO_STREAM, NsysReader

MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD"}
MEMCPY_KINDS |= {9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}  # 11-13: unified memory
# ENUM_CUDA_MEM_KIND and ENUM_CUPTI_SYNC_TYPE labels (the export's own tables are read when present).
MEM_KINDS = dict(enumerate(("Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static")))
MEM_KINDS[7] = "Unknown"
SYNC_TYPES = dict(enumerate(("Unknown", "Event sync", "Stream wait sync", "Stream sync", "Context sync")))


_END = int(FlowPhase.END)


# The columns of every CUPTI activity on a device stream (kernels, copies, sets, synchronisations).
_ON_STREAM = ("start", "end", "globalPid", "deviceId", "contextId", "streamId", "correlationId")


def read_device(r: NsysReader) -> None:
    r.merged([_kernels(r), _copies(r, MEMCPY), _copies(r, MEMSET), _cuda_events(r)])
    r.merged([_syncs(r)])
    r.merged([_gpu_metrics(r)])


def _kernels(r: NsysReader) -> Source | None:
    if not r.has_columns(KERNEL, "start", "end"):
        return None
    name_col = "demangledName" if r.schema.has(KERNEL, "demangledName") else "shortName"
    cols: tuple[str, ...] = (*_ON_STREAM, name_col)
    cols += ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread")
    cols += ("staticSharedMemory", "dynamicSharedMemory")
    heads, note, ordinal, mark = r.layout.args_heads, r.layout.note, r.layout.ordinal, r.layout.mark
    tally = r.layout.tally
    tracks, names = r._gpu, r._named

    def handle(row: tuple) -> None:
        start, end, gpid, device, ctx, stream, corr, name_id, *dims, regs, static, dynamic, launched = row
        if not times_ok(start, end):
            r.bad_time(KERNEL, start, end)
            return
        track = tracks.get(("gpu", gpid, device, ctx, stream)) or r.gpu(gpid, device, ctx, stream)
        prefix, name, watched, resolved = names.get((name_id, "kernel")) or r.named(name_id, "kernel")
        if not resolved:
            r.unresolved(KERNEL, name_col)
        gx, gy, gz, bx, by, bz = dims
        if int is type(device) is type(ctx) is type(stream) is type(corr) is type(regs) is type(static) and int is type(
            dynamic
        ) is type(gx) is type(gy) is type(gz) is type(bx) is type(by) is type(bz):  # %d would truncate a REAL
            text = (
                b'{"device":%d,"context":%d,"stream":%d,"correlation":%d,"registers per thread":%d,'
                b'"shared memory":%d,"grid":[%d,%d,%d],"block":[%d,%d,%d]}'
                % (device, ctx, stream, corr, regs, static + dynamic, *dims)
            )
            body = prefix + heads[len(text)] + text
        else:  # a NULL, a REAL, a BLOB among them: as they are
            args = {"device": device, "context": ctx, "stream": stream, "correlation": corr}
            shared = static + dynamic if _number(static) and _number(dynamic) else None
            args |= {"registers per thread": regs, "shared memory": shared, "grid": dims[:3], "block": dims[3:]}
            body = r.body(prefix, present(args))
        track[2].append((start, start - end, 0, ordinal(), body))
        mark(device_tag(name), track[0], track[1], start, end)
        tally(track[0], track[1], name, start, end - start)
        if watched:
            note(name, track[0], track[1], start, end - start)
        _flow_end(r, track, start, gpid, corr, launched)

    return r.con.execute(_launched_select(r, KERNEL, cols)), handle


def _number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _launched_select(r: NsysReader, table: str, cols: Sequence[str]) -> str:
    """``cols`` of a GPU work table and whether the runtime call that launched each row is in the export."""
    if r.launches and r.schema.has(table, "globalPid", "correlationId"):
        join = ' left join temp.nsys_launches as l on l.p = g."globalPid" >> 24 and l.c = g."correlationId"'
        return r.schema.select(table, cols, "g", ("l.c is not null",), join)
    return r.schema.select(table, cols, "g", ("0",))


def _flow_end(r: NsysReader, track: tuple, start: int, gpid: Any, corr: Any, launched: Any) -> None:
    if launched:
        r.flow(track, start, _END, gpid, corr)
    elif type(corr) is int:
        r.not_captured += 1


def _copies(r: NsysReader, table: str) -> Source | None:
    """Memory copies and sets, named as Kineto names them (``Memcpy HtoD (Pageable -> Device)``)."""
    if not r.has_columns(table, "start", "end"):
        return None
    kinds = r.schema.labels("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    cols: tuple[str, ...] = (*_ON_STREAM, "bytes")
    # a memcpy's kind and its source and destination memory; a memset's memory and value
    cols += ("copyKind", "srcKind", "dstKind") if table == MEMCPY else ("memKind", "value", "memKind")

    def handle(row: tuple) -> None:
        start, end, gpid, device, ctx, stream, corr, size, a, b, c, launched = row
        if not times_ok(start, end):
            r.bad_time(table, start, end)
            return
        if table == MEMCPY:
            name = f"Memcpy {MEMCPY_KINDS.get(a, 'Unknown')}"
            if b is not None and c is not None:
                name += f" ({kinds.get(b, b)} -> {kinds.get(c, c)})"
            cat = "gpu_memcpy"
        else:
            name, cat = ("Memset" if a is None else f"Memset ({kinds.get(a, a)})"), "gpu_memset"
        args = {"device": device, "context": ctx, "stream": stream, "correlation": corr, "bytes": size}
        if table == MEMSET:
            args["value"] = b
        track = r.gpu(gpid, device, ctx, stream)
        r.emit(track[2], start, start - end, 0, r.body(r.layout.prefix(name, cat), present(args)))
        r.layout.mark(DEVICE_COMPUTE, track[0], track[1], start, end)
        r.layout.tally(track[0], track[1], name, start, end - start)
        _flow_end(r, track, start, gpid, corr, launched)

    return r.con.execute(_launched_select(r, table, cols)), handle


def _syncs(r: NsysReader) -> Source | None:
    if not r.has_columns(SYNC, "start", "end"):
        return None
    types = r.schema.labels("ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES)
    cols: tuple[str, ...] = (*_ON_STREAM, "syncType")
    cols += ("deprecatedSyncType", "eventId")

    def handle(row: tuple) -> None:
        start, end, gpid, device, ctx, stream, corr, kind, old_kind, event, launched = row
        if not times_ok(start, end):
            r.bad_time(SYNC, start, end)
            return
        kind = kind if kind is not None else old_kind
        track = r.gpu(gpid, device, ctx, stream, "sync")
        event = None if event == NO_EVENT else event
        args = present({"stream": None if stream == NO_STREAM else stream, "correlation": corr, "event": event})
        name = types.get(kind, f"sync type {kind}")
        r.emit(track[2], start, start - end, 0, r.body(r.layout.prefix(name, "cuda_sync"), args))
        _flow_end(r, track, start, gpid, corr, launched)

    return r.con.execute(_launched_select(r, SYNC, cols)), handle


def _cuda_events(r: NsysReader) -> Source | None:
    """CUDA events recorded on a stream: an instant where the device completed each."""
    if not r.has_columns(CUDA_EVENT, "timestamp"):
        return None

    def handle(row: tuple) -> None:
        ts, gpid, device, ctx, stream, corr, event = row
        if ts == 0:  # "0 if not collected"
            r.dropped.add(
                Stat.NSYS_ROWS_NOT_DRAWN,
                1,
                "nsys CUPTI_ACTIVITY_KIND_CUDA_EVENT rows not drawn (no device timestamp collected)",
            )
            return
        if not times_ok(ts, ts):
            r.bad_time(CUDA_EVENT, ts, ts)
            return
        track = r.gpu(gpid, device, ctx, stream, "event")
        args = present({"event": event, "correlation": corr})
        r.emit(track[2], ts, 0, 1, r.body(r.layout.prefix("CUDA event", "cuda_event"), args))

    cols = ("timestamp", "globalPid", "deviceId", "contextId", "streamId", "correlationId", "eventId")
    return r.schema.rows(CUDA_EVENT, cols), handle


def _gpu_metrics(r: NsysReader) -> Source | None:
    """GPU metric samples: a counter per GPU and metric (the GPU in the low byte of typeId)."""
    if not r.has_columns(GPU_METRICS, "timestamp", "typeId", "metricId", "value"):
        return None
    names: dict[tuple[Any, Any], str] = {}
    for type_id, metric, name in r.schema.rows("TARGET_INFO_GPU_METRICS", ("typeId", "metricId", "metricName")):
        if type(name) is str:
            names[(type_id, metric)] = name
    series: dict[tuple[Any, Any], tuple[OriginKey, ThreadKey, str, bool]] = {}

    def handle(row: tuple) -> None:
        ts, type_id, metric, value = row
        if not times_ok(ts, ts):
            r.bad_time(GPU_METRICS, ts, ts)
            return
        if type(value) is not int and type(value) is not float:
            r.dropped.add(Stat.COUNTER_WITHOUT_VALUE, 1, "counter row without a numeric value (nsys GPU_METRICS)")
            return
        found = series.get((type_id, metric))
        if found is None:
            device = type_id & 0xFF if type(type_id) is int else None
            name = names.get((type_id, metric))
            origin = r.place.device_origin(device)
            key = ("metrics", device)
            r.tracks.setdefault(key, (origin, None))
            found = (origin, key, name or f"metric {metric}", name is not None)  # "GPU <d>: " before it
            series[(type_id, metric)] = found
        if not found[3]:
            r.unresolved(GPU_METRICS, "metricId", "TARGET_INFO_GPU_METRICS")
        r.layout.counter_sample(found[0], found[1], found[2], ts, value)

    return r.schema.rows(GPU_METRICS, ("timestamp", "typeId", "metricId", "value")), handle
