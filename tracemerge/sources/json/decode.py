"""A batch of a JSON trace's event array decoded into events, for
:class:`~tracemerge.sources.json.stream.EventStream`.

:class:`BatchDecoding` is mixed into the stream: :meth:`~BatchDecoding._decode` turns the text of
``[`` then whole events then ``]`` into a list of events of the stream's typed struct, or of its
lenient one when values do not fit the typed fields; elements that are not objects are counted in
``notes``, values nested too deep are cut (and counted once), and text msgspec cannot read
(lone surrogates, NaN, a bad UTF-8 byte) is read as Python's json reads it rather than lose the
file. It sets ``plain_text`` and ``bind_ids`` for the batch (see ChromeEvents.add_batch); text
that is not JSON raises msgspec.DecodeError.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec

from tracemerge.core.stats import Losses, Stat
from tracemerge.core.units import plain_json
from tracemerge.evidence.anchors import STEP_ARGS_KEY
from tracemerge.sources.json.text import (
    ARGS_LEVEL,
    ELEMENTS,
    KINDS_BY_FIRST_BYTE,
    NumberText,
    is_truncated,
    value_kind,
    without_lone_surrogates,
)


class BatchDecoding:
    """Decoding of one batch's text (the stream's decoders and state, as ``EventStream`` keeps them)."""

    _typed: msgspec.json.Decoder
    _lenient: msgspec.json.Decoder | None
    _lenient_type: type | None
    _lenient_fields: tuple[str, ...]
    _one: msgspec.json.Decoder | None
    _text_fields: frozenset[str]
    notes: Losses
    plain_text: bool
    bind_ids: bool
    step_args: bool
    _cut: Callable[..., bytes]

    def _decode(self, doc: bytes) -> list:
        """The events of ``doc`` (``[`` then a run of the buffer's events, ``]``)."""
        try:
            return self._decode_as_is(doc)
        except RecursionError:  # a value nested beyond what any decoder follows: that value goes
            return self._decode_as_is(self._cut(doc, ARGS_LEVEL))

    def _decode_as_is(self, doc: bytes) -> list:
        self.plain_text = plain_json(doc)
        self.bind_ids = b'"bind_id"' in doc
        self.step_args = STEP_ARGS_KEY.search(doc) is not None
        try:
            return self._typed.decode(doc)
        except msgspec.ValidationError:
            if self._lenient is None:
                raise
        except msgspec.DecodeError as exc:
            events = self._decode_malformed(doc, exc)
            if events is None:
                raise
            return events
        try:
            return self._lenient.decode(doc)
        except msgspec.ValidationError:  # an element that is not an object
            return self._objects_only(doc)

    def _decode_malformed(self, doc: bytes, exc: msgspec.DecodeError) -> list | None:
        """A batch msgspec cannot read (``exc``): lone surrogate escapes become U+FFFD; what
        Python's own json writes and reads (NaN, Infinity) and text with a bad UTF-8 byte are read
        as Python reads them (the bad byte as U+FFFD) rather than lose the file. None: not JSON
        after all, ``exc`` stands (the caller raises it again, from its ``except``: raised from
        here, the traceback would hold this frame and the frame ``exc``, a cycle that the read,
        its cyclic collector paused, would keep with the batch's text, once per failed cut)."""
        mended = without_lone_surrogates(doc)
        if mended is not doc:  # (msgspec may call such an escape truncated input)
            return self._decode(mended)
        if is_truncated(exc) or self._lenient_type is None:
            return None
        text = doc.decode("utf-8", "replace")
        try:
            values = json.loads(text, parse_float=NumberText) if self._text_fields else json.loads(text)
        except ValueError:
            return None
        self.plain_text = False
        events = [self._from_python(v) for v in values if type(v) is dict]
        return self._noted(events, Counter(value_kind(v) for v in values if type(v) is not dict))

    def _objects_only(self, doc: bytes) -> list:
        """The objects of an array that also holds other values, which are counted."""
        assert self._one is not None
        try:
            elements = ELEMENTS.decode(doc)
        except msgspec.DecodeError as exc:
            found = self._decode_malformed(doc, exc)
            if found is None:
                raise
            return found
        events: list = []
        others: Counter[str] = Counter()
        for element in elements:
            text = bytes(element)
            if text[:1] == b"{":
                events.append(self._one.decode(text))
            else:
                others[KINDS_BY_FIRST_BYTE.get(text[:1], "number")] += 1
        return self._noted(events, others)

    def _noted(self, events: list, others: Counter[str]) -> list:
        for kind, n in others.items():
            self.notes.add(Stat.EVENT_NOT_OBJECT, n, f"event array element that is not an object ({kind})")
        return events

    def _from_python(self, value: dict) -> Any:
        fields = {}
        for key in self._lenient_fields:
            if key == "args" or key not in value:
                continue
            v = value[key]
            if key in self._text_fields:
                v = msgspec.Raw(v.text.encode() if type(v) is NumberText else msgspec.json.encode(v))
            elif type(v) is NumberText:
                v = float(v)
            fields[key] = v
        if "args" in value:
            fields["args"] = msgspec.Raw(msgspec.json.encode(value["args"], enc_hook=float))
        return self._lenient_type(**fields)  # type: ignore[misc]
