from tracemerge.cli.main import run

run()
