"""bare_process()'s child: python -m benchmarks.gpu_step MODEL DOC N_CTX MEMORY ANSWER FLASH_ATTN."""

import sys
from pathlib import Path

from benchmarks.gpu_step import bare_run

m, d, c, mem, ans, fa = sys.argv[1:7]
bare_run(Path(m), Path(d), int(c), int(mem), int(ans), bool(int(fa)))
