"""Reading the small TOML files users give (offsets, phase rules), with one-line errors."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from tracemerge.core.bounds import MAX_DEPTH


def read_toml(path: Path) -> dict[str, Any]:
    """The file's tables; ValueError naming the file when it cannot be read or is not TOML. A
    value nested more than MAX_DEPTH levels deep is refused as the readers refuse any value they
    cannot take (one line naming the file and the line; no TOML reader follows it)."""
    # Imported here: most runs read no TOML, and the reader costs 3 ms of every start-up.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        text = path.read_text(encoding="utf-8")
        _check_depth(path, text)
        return tomllib.loads(text)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not TOML ({exc})") from None
    except RecursionError:
        raise ValueError(f"{path}: not TOML we read (a value nested too deep)") from None


# Strings (multi-line, basic with escapes, literal), comments, and the brackets nesting is counted from.
_TOKENS = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]', re.S)


def _check_depth(path: Path, text: str) -> None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                raise ValueError(f"{path}:{line}: a value nested more than {MAX_DEPTH} levels deep: not read")
        elif token in ("]", "}"):
            depth -= 1
