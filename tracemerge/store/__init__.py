"""What a source reads one file into: the event store, its columns and spill files, and the read options."""
