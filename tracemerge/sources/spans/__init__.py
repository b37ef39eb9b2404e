"""Span logs written by frameworks: role/rank JSONL, AReaL sessions, tracker scalars."""
