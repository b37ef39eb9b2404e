"""Flows: each flow point bound to its slice, and the flows numbered across the trace."""
