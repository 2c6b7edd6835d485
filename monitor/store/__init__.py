"""The run store: one SQLite file per run (schema, writer, reader), its records, and the
tools that keep it readable (thinning, salvage of a damaged file, damage reports)."""
