"""Two runs compared: ``tracemerge diff`` and the regression gate, as library calls."""
