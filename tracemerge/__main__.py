from tracemerge.cli import run

run()
