"""The command line: thin commands over the library; the engine is loaded when a command runs."""
