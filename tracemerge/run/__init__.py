"""Running a merge: the read of every file, a file's job, executors (local and Ray) and the output file."""
