"""Test helpers: a private PostgreSQL server, workloads, and SQL-interface capture."""
