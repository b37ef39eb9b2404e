"""What every stage shares: the event model, named statistics, errors, units and input bounds, and
how a forked helper process reports back and takes signals."""
