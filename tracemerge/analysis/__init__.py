"""What the phases say about a run: the step summary (its numbers, tables and typed records), and
``summarize()``, which reads a run to give them without writing a trace."""
