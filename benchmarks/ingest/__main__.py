"""A memory measurement's own process: python -m benchmarks.ingest --child MODE KIND PATH."""

import sys

from benchmarks.ingest import child_main

child_main(sys.argv[2], sys.argv[3], sys.argv[4])
