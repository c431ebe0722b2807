"""What every benchmark shares: the registry of benchmarks and their targets (registry), one
results file per benchmark in one schema (results), interleaved paired timing (timing), a
memagent process in a fresh home with its record, wall time and peak RSS (runner), the real
models and texts the benchmarks read (fixtures), the bare llama-cpp-python loop the "against the
bare engine" ratios use (bare), and docs/PERFORMANCE.md made from the results (doc)."""
