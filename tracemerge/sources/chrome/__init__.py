"""Chrome trace-event JSON (torch.profiler / Kineto and others), normalised column by column."""
