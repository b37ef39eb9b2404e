"""The exit statuses of every command: one place, light enough for the command line's start-up."""

EXIT_OK = 0
EXIT_FATAL = 1  # nothing written
EXIT_USAGE = 2  # bad usage (click's own status for it)
EXIT_INCOMPLETE = 3  # written, but files were skipped or events lost (check: import errors or losses)
EXIT_REGRESSION = 4  # a --fail-over gate found a regression (tracemerge.diff)
