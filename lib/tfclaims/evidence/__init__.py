"""Where numbers become decisions: comparisons and the verdict ladder, statistics, tables, seed-band curves.

Nothing here is reached by a run (tests/test_package.py): editing it re-analyses, never reruns."""
