"""memagent's benchmarks: `python -m benchmarks list | run NAME | doc` (see __main__ and README.md).

Each benchmark is one module here, registered in harness/registry.py; harness/ holds what they
share; results/ holds one JSON file per benchmark, from which docs/PERFORMANCE.md is made."""
