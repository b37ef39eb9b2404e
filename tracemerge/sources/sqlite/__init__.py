"""SQLite inputs opened read-only and queried within budgets."""
