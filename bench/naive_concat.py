"""The script people write today, as a baseline: load every trace, concatenate, dump.

    python bench/naive_concat.py OUT.json FILE...

stdlib json, whole files in memory, no pid remapping, no clock handling.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def main() -> None:
    out, *files = sys.argv[1:]
    events: list = []
    for name in files:
        data = Path(name).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        events.extend(json.loads(data)["traceEvents"])
    with open(out, "w") as f:
        json.dump({"traceEvents": events}, f)


if __name__ == "__main__":
    main()
