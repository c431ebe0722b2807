"""B9's part `pdfs`: real PDFs read by memagent against pypdf's bare loop, which is what memagent's
PDF reader did before it tidied pages (running heads, leader dots, hyphens) and read tables: the same
pypdf calls and no more (B9's `pdf` row measured the two at parity). The PDFs without tables are held
to 1.2x (page.PDFS); a page is only searched for tables when its rules could bound one, so they
should cost little more than the tidying. The PDFs with tables are timed too, and not held to a target.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.harness.fixtures import DATA, REAL_PDFS
from benchmarks.harness.timing import race

SAMPLES = DATA / "samples"
# Real PDFs made by tools nobody here wrote, without a table a page's rules bound (tests/data/README.md
# and tests/data/shared/fixtures/README.md say what each is); the machine's own where it has some.
WITHOUT_TABLES = [
    REAL_PDFS / "crazyones.pdf",
    REAL_PDFS / "multilang.pdf",
    REAL_PDFS / "Seige_of_Vicksburg_Sample_OCR.pdf",
    SAMPLES / "hyperref-paper-p3-5.pdf",
    SAMPLES / "hyperref-paper-p8.pdf",
    SAMPLES / "hyperref-paper-p21.pdf",
    SAMPLES / "pandora-p3.pdf",
    SAMPLES / "pspicture-p3.pdf",
    SAMPLES / "elsarticle-5p-p2.pdf",
]
# GeoBase's revision history is a bordered table (Word's); its UML diagrams' lines are searched too
WITH_TABLES = [
    SAMPLES / "array-p2.pdf",
    SAMPLES / "booktabs-p2.pdf",
    SAMPLES / "libreoffice-table.pdf",
    REAL_PDFS / "GeoBase_NHNC1_Data_Model_UML_EN.pdf",
]
MACHINE = Path("/usr/share/doc")  # Debian's documentation: TeX Live's manuals where installed
MACHINE_FILES = 30
MACHINE_BYTES = 1_500_000


def _machine_pdfs() -> list[Path]:
    if not MACHINE.is_dir():
        return []
    found = sorted(p for p in MACHINE.rglob("*.pdf") if p.is_file() and p.stat().st_size <= MACHINE_BYTES)
    step = max(1, len(found) // MACHINE_FILES)
    return found[::step][:MACHINE_FILES]


def _searched(path: Path) -> tuple[int, int]:
    """The PDF's pages, and how many of them memagent searches for tables."""
    from pypdf import PdfReader

    from memagent_cli.ingest.pdftables import Pieces, Rules

    pages = searched = 0
    with open(path, "rb") as fh:
        for page in PdfReader(fh).pages:
            rules, pieces = Rules(), Pieces()
            page.extract_text(visitor_operand_before=rules, visitor_text=pieces)
            pages += 1
            searched += rules.promising(pieces, float(page.mediabox.height))
    return pages, searched


def memagent_text(path: Path) -> str:
    """memagent's full read, as `inspect --text` and `ask` do it (as B9's speed part reads)."""
    from memagent_cli.ingest.sources import collect_sources, read_source

    notes: list[str] = []
    (source,) = collect_sources([str(path)], warn=notes.append)
    return "".join(s.text for s in read_source(source, warn=notes.append))


def _timed(paths: list[Path], repeat: int) -> dict:
    from benchmarks.ingest.bare import bare_pdf

    rows = []
    for path in paths:
        memagent_text(path), bare_pdf(path)  # the warm-up: imports, the page cache
        times = race({"memagent": lambda: memagent_text(path), "bare": lambda: bare_pdf(path)}, repeat)
        m, b = statistics.median(times["memagent"]), statistics.median(times["bare"])
        pages, searched = _searched(path)
        rows.append(
            {
                "file": path.name,
                "pages": pages,
                "searched": searched,
                "memagent_seconds": round(m, 4),
                "bare_seconds": round(b, 4),
                "ratio": round(m / b, 3),
            }
        )
        print(
            f"{path.name[:40]:40} {pages:4} pages ({searched} searched)  memagent {m:.3f} s  bare {b:.3f} s  {m / b:.2f}x",
            flush=True,
        )
    m = sum(row["memagent_seconds"] for row in rows)
    b = sum(row["bare_seconds"] for row in rows)
    return {
        "files": rows,
        "pages": sum(row["pages"] for row in rows),
        "searched": sum(row["searched"] for row in rows),
        "memagent_seconds": round(m, 3),
        "bare_seconds": round(b, 3),
        "ratio": round(m / b, 3) if b else None,
    }


def measure(repeat: int) -> dict:
    machine = _machine_pdfs()
    without = [p for p in WITHOUT_TABLES if p.exists()] + machine
    result = {
        "without_tables": _timed(without, repeat),
        "with_tables": _timed([p for p in WITH_TABLES if p.exists()], repeat),
        "machine_files": len(machine),
    }
    w = result["without_tables"]
    print(f"without tables: {len(without)} PDFs, {w['pages']} pages, memagent / bare {w['ratio']}x", flush=True)
    return result
