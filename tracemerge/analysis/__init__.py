"""What the phases say about a run: holdups, the critical path, device time and the step summary."""
