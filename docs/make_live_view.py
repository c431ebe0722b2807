"""Regenerates docs/live-view.svg: the live view of a real run, saved by `memagent ask --svg`.

The run reads a generated 12-page PDF with the trained code-word model of tests/data (no
download): the last page holds the sentence that gives the code word, the rest is filler, and the
picture shows the step that read it, what it added to the memory, and the answer. The first seed
whose run answers right with that step in view is drawn (a chunk boundary through the sentence
hides it from the model). Needs the test extra (pip install -e '.[test]') and testkit/, from the
repository's root:

    PYTHONPATH=. python docs/make_live_view.py [--out FILE]
"""

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fpdf import FPDF

from testkit.codeword import QUESTION, make_document
from testkit.texts import CODEWORD_ASK, REPO

PAGES = 12
SHOWN_STEPS = 8  # the steps the live view keeps on screen


def write_pdf(path: Path, seed: int) -> str:
    """The PDF, and the code word its last page gives."""
    rng = random.Random(seed)
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for page in range(1, PAGES + 1):
        pdf.add_page()
        document = make_document(rng, 400, where=0.8, fact=page == PAGES)
        pdf.multi_cell(0, 5, " ".join(document.text.split()))
    pdf.output(str(path))
    assert document.value is not None
    return document.value


def ask(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "memagent_cli", "ask", "report.pdf", QUESTION, *map(str, CODEWORD_ASK)]
    return subprocess.run([*command, "--temperature", "0", "--no-trace", *extra], cwd=folder, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "live-view.svg")
    out = parser.parse_args().out.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        picture = folder / "live-view.svg"
        for seed in range(50):  # one run each: its record judges the picture it drew
            value = write_pdf(folder / "report.pdf", seed)
            record = json.loads(ask(folder, "--json", "--quiet", "--svg", str(picture)).stdout)
            steps = record["steps"]
            found = next((s["index"] for s in steps if value in s["memory"]), None)
            if record["answer"] == value and found is not None and found > len(steps) - SHOWN_STEPS + 1:
                shutil.move(picture, out)
                print(f"seed {seed}: step {found} of {len(steps)} found {value!r}")
                return
    raise SystemExit("no seed of 50 gave a right answer with its step in view")


if __name__ == "__main__":
    main()
