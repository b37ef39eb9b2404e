from tracemerge.cli import main

main()
