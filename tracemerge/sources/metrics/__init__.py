"""Engine metrics: Prometheus text, snapshots and query results as counter tracks."""
