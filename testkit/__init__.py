"""What the tests and the benchmarks share: tiny GGUF models made on the spot (tinymodel), the
code-word task (codeword) and its QwenLong and InfMem forms (qwenlong_task, infmem_task), checkpoints
with real models' shapes (hfcheckpoint), legacy Office files (officefiles), and prose and paths
(texts). Not part of the installed package."""
