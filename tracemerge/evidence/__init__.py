"""The clock and phase evidence a file's read notes, and the marks a file's scan carries per process."""
