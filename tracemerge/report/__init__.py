"""The run report: what was found and written, and every loss under its named statistic."""
