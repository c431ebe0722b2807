"""B9: memagent's document readers against their libraries' own extraction loops (speed; target
0.9x), peak memory of a large file's read in a fresh process (memory), OCR (ocr), what a web
page costs the model in tokens (tokens), and real PDFs with and without tables against pypdf's bare
loop (pdfs; ingest/pdfs.py). The documents are made by each format's own writer
(ingest/files.py); the bare loops are ingest/bare.py. The section in docs/PERFORMANCE.md says how.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness.fixtures import VOCAB
from benchmarks.harness.results import machine, now
from benchmarks.harness.runner import run, vmhwm_mb
from benchmarks.harness.timing import race
from benchmarks.ingest import bare, files, pdfs
from benchmarks.ingest.page import rows, section

TITLE = "reading documents"
QUICK = ["--small", "--repeat", "3"]
__all__ = ["TITLE", "QUICK", "add_arguments", "measure", "rows", "section"]
PARTS = ("speed", "memory", "ocr", "tokens", "pdfs")


def memagent_text(path: Path) -> str:
    """memagent's full read, as `inspect --text` and `ask` do it."""
    from memagent_cli.ingest.sources import collect_sources, read_source

    notes: list[str] = []
    (source,) = collect_sources([str(path)], warn=notes.append)
    return "".join(s.text for s in read_source(source, warn=notes.append))


# (name, file ending, maker, bare loop, what the bare loop is, size full, size quick). Sizes put a
# read at about half a second on this machine.
FORMATS: list[tuple[str, str, Callable[[Path, int], None], Callable[[Path], str], str, int, int]] = [
    ("docx", ".docx", files.make_docx, bare.bare_docx, "python-docx: paragraphs, then tables' cells", 300, 100),
    ("pptx", ".pptx", files.make_pptx, bare.bare_pptx, "python-pptx: shapes' text frames and tables, notes", 300, 100),
    ("xlsx", ".xlsx", files.make_xlsx, bare.bare_xlsx, "openpyxl read_only iter_rows(values_only=True)", 3000, 1000),
    ("xls", ".xls", files.make_xls, bare.bare_xls, "xlrd open_workbook, row_values", 16000, 5000),
    ("ods", ".ods", files.make_ods, bare.bare_ods, "odfpy load, teletype.extractText per cell", 1000, 350),
    ("odt", ".odt", files.make_odt, bare.bare_odt, "odfpy load, teletype.extractText per block", 700, 250),
    ("odp", ".odp", files.make_odp, bare.bare_odp, "odfpy load, teletype.extractText per page", 1200, 400),
    ("epub", ".epub", files.make_epub, bare.bare_epub, "ebooklib read_epub, lxml text_content per spine item", 600, 200),
    ("html", ".html", files.make_html, bare.bare_html, "trafilatura.extract", 400, 130),
    ("feed (rss)", ".rss", files.make_feed, bare.bare_feed, "feedparser.parse, title and summary", 800, 270),
    ("eml", ".eml", files.make_eml, bare.bare_eml, "email BytesParser, get_body, text attachments", 8000, 2700),
    ("ipynb", ".ipynb", files.make_ipynb, bare.bare_ipynb, "json, sources and text outputs", 8000, 2700),
    ("rtf", ".rtf", files.make_rtf, bare.bare_rtf, "striprtf rtf_to_text", 1500, 500),
    ("txt (cp932)", ".txt", files.make_txt_cp932, bare.bare_txt, "bytes.decode('cp932'), the encoding known", 300000, 100000),
    ("pdf", ".pdf", files.make_pdf, bare.bare_pdf, "pypdf extract_text per page", 100, 35),
]


def speed(folder: Path, quick: bool, repeat: int, only: set[str] | None) -> list[dict]:
    rows = []
    for name, ending, make, loop, what, full, small in FORMATS:
        if only and name.split()[0] not in only:
            continue
        path = folder / f"{name.split()[0]}{ending}"
        make(path, small if quick else full)
        ours_text, bare_text = memagent_text(path), loop(path)  # the warm-up: imports, page cache
        times = race({"memagent": lambda: memagent_text(path), "bare": lambda: loop(path)}, repeat)
        m, b = statistics.median(times["memagent"]), statistics.median(times["bare"])
        row = {
            "format": name,
            "bytes": path.stat().st_size,
            "bare": what,
            "memagent_seconds": round(m, 3),
            "bare_seconds": round(b, 3),
            "ratio": round(b / m, 3),
            "memagent_chars": len(ours_text),
            "bare_chars": len(bare_text),
            "runs": {k: [round(v, 3) for v in vs] for k, vs in times.items()},
        }
        print(
            f"{name:12} {row['bytes'] / 1e6:6.2f} MB  memagent {m:6.3f} s  bare {b:6.3f} s  "
            f"bare/memagent {row['ratio']:5.2f}  chars {len(ours_text):,} / {len(bare_text):,}",
            flush=True,
        )
        rows.append(row)
        path.unlink()
    return rows


# --------------------------------------------------------------------------------------------
# Peak memory, each read in a fresh process

# What each child imports before it reads, so the baseline child that only imports pays the same.
_IMPORTS = {
    "xlsx": ["openpyxl", "memagent_cli.ingest.sheets"],
    "text": ["memagent_cli.ingest.text", "charset_normalizer"],
    "html": ["trafilatura", "lxml.html", "memagent_cli.ingest.web"],
}


def child_main(mode: str, kind: str, path: str) -> None:
    """Run in a fresh process: import, read (unless `mode` is "imports"), print peak RSS."""
    import importlib
    import resource

    for module in _IMPORTS[kind] + ["memagent_cli.ingest.sources"]:
        importlib.import_module(module)
    t = time.perf_counter()
    chars = 0
    if mode == "memagent":
        from memagent_cli.ingest.sources import collect_sources, read_source

        (source,) = collect_sources([path], warn=lambda m: None)
        for segment in read_source(source, warn=lambda m: None):  # streamed: each segment dropped once counted
            chars += len(segment.text)
    elif mode == "bare" and kind == "xlsx":
        import openpyxl

        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
        for sheet in book.worksheets:
            for row in sheet.iter_rows(values_only=True):
                chars += len("\t".join("" if v is None else str(v) for v in row)) + 1
        book.close()
    elif mode == "bare" and kind == "text":
        with open(path, encoding="utf-8") as fh:  # Python's own streamed decoding, 1 MiB at a time
            while block := fh.read(1 << 20):
                chars += len(block)
    elif mode == "bare" and kind == "html":
        chars = len(bare.bare_html(Path(path)))
    seconds = time.perf_counter() - t
    # VmHWM is this process's own peak. ru_maxrss can include the parent's before exec (the
    # forked copy of its memory counts toward the child's high-water mark).
    peak = vmhwm_mb(os.getpid()) or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mb": round(peak, 1), "seconds": round(seconds, 3), "chars": chars}))


def _in_child(mode: str, kind: str, path: Path) -> dict:
    out = run([sys.executable, "-m", "benchmarks.ingest", "--child", mode, kind, str(path)])
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_text(path: Path, megabytes: int) -> None:
    rng = random.Random(16)
    block = "\n\n".join(files.paragraph(rng) for _ in range(2000)).encode()
    with open(path, "wb") as fh:
        for _ in range(megabytes * 10**6 // len(block) + 1):
            fh.write(block)


def _large_page(folder: Path, quick: bool) -> tuple[Path, str]:
    """A real large page where this machine has one (Node.js's single-page manual), else one made here."""
    real = Path("/usr/share/doc/nodejs/api/all.html")
    if real.exists() and not quick:
        return real, str(real)
    path = folder / "large.html"
    files.make_html(path, 400 if quick else 3000)
    return path, f"generated ({path.stat().st_size / 1e6:.1f} MB)"


def memory(folder: Path, quick: bool) -> list[dict]:
    large = []
    xlsx = folder / "large.xlsx"
    rows = 20_000 if quick else 120_000
    t = time.perf_counter()
    files.make_xlsx(xlsx, rows, sheets=1)
    print(f"large .xlsx: {rows:,} rows written in {time.perf_counter() - t:.1f} s", flush=True)
    large.append(("xlsx", xlsx, f"{rows:,} rows x 8 columns", rows + 1))
    text = folder / "large.txt"
    make_text(text, 20 if quick else 200)
    large.append(("text", text, "UTF-8 prose", None))
    page, where = _large_page(folder, quick)
    large.append(("html", page, where, None))
    results = []
    for kind, path, what, n_rows in large:
        base = _in_child("imports", kind, path)
        ours = _in_child("memagent", kind, path)
        theirs = _in_child("bare", kind, path)
        row = {
            "file": kind,
            "what": what,
            "bytes": path.stat().st_size,
            "baseline_mb": base["peak_mb"],
            "memagent_mb": round(ours["peak_mb"] - base["peak_mb"], 1),
            "bare_mb": round(theirs["peak_mb"] - base["peak_mb"], 1),
            "memagent_seconds": ours["seconds"],
            "bare_seconds": theirs["seconds"],
            "memagent_chars": ours["chars"],
        }
        if n_rows:
            row["rows"] = n_rows
            row["memagent_rows_per_second"] = round(n_rows / ours["seconds"])
            row["bare_rows_per_second"] = round(n_rows / theirs["seconds"])
        row["memagent_mb_per_second"] = round(row["bytes"] / 1e6 / ours["seconds"], 1)
        print(
            f"{kind:5} {row['bytes'] / 1e6:7.1f} MB  peak RSS over imports: memagent {row['memagent_mb']} MB, "
            f"bare {row['bare_mb']} MB; {ours['seconds']:.1f} s / {theirs['seconds']:.1f} s",
            flush=True,
        )
        results.append(row)
        if path.parent == folder:
            path.unlink()
    return results


# --------------------------------------------------------------------------------------------
# OCR

_SCAN_LINES = 14


def _page_lines(rng: random.Random) -> list[str]:
    lines = []
    while len(lines) < _SCAN_LINES:
        text = files.sentence(rng)
        if len(text) <= 60:
            lines.append(text)
    return lines


def ocr(folder: Path, pages: int, repeat: int) -> dict:
    try:
        from memagent_cli.ingest.ocr import PdfOcr, ocr_available  # noqa: F401
    except ImportError as exc:
        print(f"OCR not available ({exc})")
        return {"available": False, "why": str(exc)}
    if not ocr_available():
        print("OCR not available (the ocr extra is not installed)")
        return {"available": False, "why": "the ocr extra is not installed"}
    import pypdfium2 as pdfium
    from fpdf import FPDF

    from memagent_cli.ingest.sources import collect_sources, read_source

    rng = random.Random(17)
    texts = [_page_lines(rng) for _ in range(pages)]
    pictures = []
    for lines in texts:  # each page drawn with a text layer, then rendered to pixels at 200 dpi
        pdf = FPDF(unit="mm", format=(148, 210))
        pdf.set_margins(12, 12, 12)
        pdf.add_page()
        pdf.set_font("Helvetica", size=11)
        for line in lines:
            pdf.cell(0, 8, line, new_x="LMARGIN", new_y="NEXT")
        document = pdfium.PdfDocument(bytes(pdf.output()))
        pictures.append(document[0].render(scale=200 / 72).to_pil().convert("L"))
        document.close()
    scan = FPDF(unit="mm", format=(148, 210))
    for picture in pictures:
        scan.add_page()
        scan.image(picture, x=0, y=0, w=148)
    path = folder / "scan.pdf"
    scan.output(str(path))

    def read() -> str:
        (source,) = collect_sources([str(path)], warn=lambda m: None)
        return "".join(s.text for s in read_source(source, warn=lambda m: None, ocr="auto"))

    t = time.perf_counter()
    text = read()  # the first read loads the engine (once a process)
    cold = time.perf_counter() - t
    seconds = []
    for _ in range(repeat):
        t = time.perf_counter()
        text = read()
        seconds.append(time.perf_counter() - t)
    warm = statistics.median(seconds)
    known = " ".join(" ".join(lines) for lines in texts)
    got = " ".join(text.split())
    accuracy = difflib.SequenceMatcher(None, known, got, autojunk=False).ratio()
    folded = difflib.SequenceMatcher(None, known.lower(), got.lower(), autojunk=False).ratio()
    result = {
        "available": True,
        "pages": pages,
        "page": f"A5, {_SCAN_LINES} lines of 11-point Helvetica, scanned at 200 dpi (greyscale)",
        "cold_seconds": round(cold, 2),
        "seconds": round(warm, 2),
        "pages_per_second": round(pages / warm, 3),
        "seconds_per_page": round(warm / pages, 2),
        "chars": len(known),
        "accuracy": round(accuracy, 4),
        "accuracy_ignoring_case": round(folded, 4),
        "threads": os.cpu_count(),
    }
    print(
        f"OCR: {pages} pages in {warm:.1f} s ({result['pages_per_second']} pages/s; "
        f"first read {cold:.1f} s with the engine's load), accuracy {accuracy:.4f}",
        flush=True,
    )
    path.unlink()
    return result


# --------------------------------------------------------------------------------------------
# What a web page costs in tokens

_PAGES = (
    "/usr/share/doc/nodejs/api/fs.html",
    "/usr/share/doc/python3/python-policy.html",
    "/usr/share/doc/valgrind/html/manual-core.html",
    "/usr/share/doc/libjs-underscore/index.html",
    "/usr/share/doc/ninja-build/manual.html",
)


def _real_pages() -> list[Path]:
    found = [Path(p) for p in _PAGES if Path(p).exists()]
    if found:
        return found
    candidates = sorted(Path("/usr/share/doc").rglob("*.html")) if Path("/usr/share/doc").exists() else []
    return [p for p in candidates if p.stat().st_size > 50_000][:4]


def _tokenizers() -> dict[str, Callable[[str], int]]:
    counters: dict[str, Callable[[str], int]] = {}
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base")
        counters["cl100k_base"] = lambda text: len(encoding.encode(text, disallowed_special=()))
    except Exception as exc:  # tiktoken downloads its data on first use: offline, there is none
        print(f"tiktoken cl100k_base not available ({type(exc).__name__}: its data is not cached and this machine is offline)")
    if VOCAB.exists():
        from benchmarks.harness.engines import tokenizer

        qwen = tokenizer(VOCAB)
        counters["qwen2"] = lambda text: len(qwen.encode(text))
    return counters


def tokens(folder: Path) -> dict:
    counters = _tokenizers()
    pages = _real_pages()
    if not pages:
        path = folder / "page.html"
        files.make_html(path, 60)
        pages = [path]
    rows = []
    for page in pages:
        raw = page.read_bytes().decode("utf-8", "replace")
        ours = memagent_text(page)
        extracted = bare.bare_html(page)
        row: dict = {"page": str(page), "bytes": page.stat().st_size, "memagent_chars": len(ours)}
        for name, count in counters.items():
            n_raw, n_ours, n_extract = count(raw), count(ours), count(extracted)
            row[name] = {
                "raw_html": n_raw,
                "memagent": n_ours,
                "trafilatura_extract": n_extract,
                "raw_over_memagent": round(n_raw / max(n_ours, 1), 2),
            }
        rows.append(row)
        shown = ", ".join(
            f"{k} {v['raw_html']:,} -> {v['memagent']:,} ({v['raw_over_memagent']}x)"
            for k, v in row.items()
            if isinstance(v, dict)
        )
        print(f"{page.name:24} {row['bytes'] / 1e3:7.0f} KB  tokens raw -> memagent: {shown}", flush=True)
    return {"tokenizers": list(counters), "pages": rows}


# --------------------------------------------------------------------------------------------
# Reporting


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--small", action="store_true", help="smaller files and fewer rounds (what --quick gives)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds per format")
    parser.add_argument("--formats", help="comma-separated formats for the speed part (docx,xlsx,txt,…; default all)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts to run (default all: {','.join(PARTS)})")


def measure(args: argparse.Namespace) -> dict:
    formats = set(args.formats.split(",")) if args.formats else None
    parts = args.parts.split(",")
    results: dict = {
        "when": now(),
        "machine": machine(),
        "load_average_at_start": round(os.getloadavg()[0], 1),
        "quick": args.small,
        "repeat": args.repeat,
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "speed" in parts:
            results["speed"] = speed(folder, args.small, args.repeat, formats)
        if "memory" in parts:
            results["memory"] = memory(folder, args.small)
        if "ocr" in parts:
            results["ocr"] = ocr(folder, 2 if args.small else 4, 1 if args.small else 2)
        if "tokens" in parts:
            results["tokens"] = tokens(folder)
        if "pdfs" in parts:
            results["pdfs"] = pdfs.measure(args.repeat)
    results["seconds"] = round(time.perf_counter() - started, 1)
    return results
