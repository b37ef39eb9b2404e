"""HolisticTraceAnalysis's loader over a directory of rank traces (its own parse, into DataFrames).

python bench/hta_load.py TRACE_DIR
"""

from __future__ import annotations

import sys


def main() -> None:
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=sys.argv[1])
    print(sum(len(t) for t in analysis.t.traces.values()))


if __name__ == "__main__":
    main()
