"""Scripts for a lent GPU machine (README.md); they call `python -m benchmarks run`."""
