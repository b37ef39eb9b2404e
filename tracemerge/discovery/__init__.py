"""The discover stage: the trace files under the given paths, their formats, and copies read once."""
