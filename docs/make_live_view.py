"""Regenerates docs/live-view.svg: the live view of a real run, saved by `memagent ask --svg`.

The run reads a generated 300-page PDF with a tiny random-weight test model (no download),
so the memory text in the picture is noise; layout, provenance and progress are real.
Needs the test extra: pip install -e '.[test]'.

    python docs/make_live_view.py
"""

import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fpdf import FPDF  # noqa: E402
from tinymodel import write_tiny_qwen2  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_qwen2(Path(tmp) / "tiny.gguf", seed=3)
        rng = random.Random(0)
        vocab = "the board signed amendment clause party agreement term notice of in by 2019 shall".split()
        pdf = FPDF()
        pdf.set_font("Helvetica", size=10)
        for page in range(1, 301):
            pdf.add_page()
            pdf.multi_cell(0, 5, f"Page {page}. " + " ".join(rng.choice(vocab) for _ in range(150)))
        pdf.output(str(Path(tmp) / "report.pdf"))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "memagent_cli",
                "ask",
                "report.pdf",
                "Who signed the 2019 amendment?",
                "-m",
                str(model),
                "--memory-tokens",
                "60",
                "--answer-tokens",
                "40",
                "--temperature",
                "0",
                "--quiet",
                "--svg",
                str(REPO / "docs" / "live-view.svg"),
            ],
            cwd=tmp,
            check=True,
        )


if __name__ == "__main__":
    main()
