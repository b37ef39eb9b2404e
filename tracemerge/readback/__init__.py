"""Reading tracemerge's own outputs back: whether a trace is whole, and the summary it carries."""
