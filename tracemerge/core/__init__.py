"""What every stage shares: the event model, named statistics, errors, units and input bounds."""
