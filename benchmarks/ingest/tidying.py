"""What memagent's PDF reading does to a corpus of real PDFs, counted, with samples to read by hand:
the figures docs/FORMATS.md gives for "PDF text" and "PDF tables" (not a numbered benchmark).

    python -m benchmarks.ingest.tidying FOLDER... [--pages 60] [--sample 200] [--seed 4242]

docs/FORMATS.md measured TeX Live's manuals (Debian's texlive-latex-base-doc and
texlive-latex-recommended-doc, `apt-get download`, `dpkg-deb -x`): every PDF under the folders, up
to 2 MB, its first `--pages` pages (60 for the hyphens and heads, 40 for the tables). It prints the
line-end hyphens joined and kept, `--sample` of the decisions drawn at random (KEEP or join, and
the line), every hyphen kept, the documents whose running heads and page numbers were left out,
the pages searched for tables, the tables found (their first rows) and the time it took.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

MAX_BYTES = 2_000_000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest.tidying", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--pages", type=int, default=60, help="pages read from each PDF")
    parser.add_argument("--sample", type=int, default=200, help="hyphen decisions printed at random")
    parser.add_argument("--seed", type=int, default=4242)
    args = parser.parse_args(argv)
    from pypdf import PdfReader

    from memagent_cli.ingest.pdftables import Pieces, Rules
    from memagent_cli.ingest.pdftext import _BREAK, Vocabulary, _without_running_heads, keeps_hyphen

    paths = sorted(p for folder in args.folders for p in folder.rglob("*.pdf") if p.stat().st_size <= MAX_BYTES)
    decisions: list[tuple[bool, str, str]] = []
    heads: list[str] = []
    extract = search = 0.0
    pages = searched = tables = 0
    for path in paths:
        try:
            reader = PdfReader(path, strict=False)
            texts = []
            for page in reader.pages[: args.pages]:
                rules, pieces = Rules(), Pieces()
                t = time.perf_counter()
                texts.append(page.extract_text(visitor_operand_before=rules, visitor_text=pieces) or "")
                extract += time.perf_counter() - t
                pages += 1
                t = time.perf_counter()
                if rules.promising(pieces, float(page.mediabox.height)):
                    searched += 1
                    tables += _tables(path, len(texts), page, rules, pieces)
                search += time.perf_counter() - t
        except Exception as exc:  # a damaged PDF of the corpus: said, and the rest goes on
            print(f"skipped {path.name}: {type(exc).__name__}")
            continue
        tidied = _without_running_heads([text.split("\n") for text in texts])
        note = tidied.note(path.name, len(texts))
        if note:
            heads.append(note)
        vocabulary = Vocabulary.of(tidied.pages)
        for text in tidied.pages:
            for match in _BREAK.finditer(text):
                first, hyphen, rest = match.groups()
                before = text[match.start() - 1] if match.start() and text[match.start() - 1] != "\n" else ""
                line_start = text.rfind("\n", 0, match.start()) + 1
                shown = text[max(line_start, match.start() - 30) : match.start()] + first + hyphen + "⏎" + rest
                decisions.append((keeps_hyphen(first, hyphen, rest, before, vocabulary), path.name, shown))
    kept = [d for d in decisions if d[0]]
    print(
        f"{len(paths)} PDFs, {pages} pages; {len(decisions)} hyphens at line ends: {len(decisions) - len(kept)} joined, {len(kept)} kept"
    )
    print(
        f"running heads or page numbers left out in {len(heads)} documents; pages searched for tables {searched}, tables {tables}"
    )
    print(f"pypdf's text {extract:.1f} s, the search for tables {search:.1f} s")
    print(f"\n{args.sample} decisions drawn at random (seed {args.seed}):")
    for keep, name, shown in random.Random(args.seed).sample(decisions, min(args.sample, len(decisions))):
        print(f"  {'KEEP' if keep else 'join'}  {name}: {shown}")
    print("\nevery hyphen kept:")
    for _, name, shown in kept:
        print(f"  {name}: {shown}")
    print("\nrunning heads:")
    for note in heads:
        print(f"  {note}")


def _tables(path: Path, number: int, page: object, rules: object, pieces: object) -> int:
    """The tables found on page `number` of `path`, printed (their first rows); how many."""
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    from memagent_cli.ingest.pdftables import find_tables, place

    height = float(page.mediabox.height)  # type: ignore[attr-defined]
    document = pdfium.PdfDocument(str(path))
    try:
        textpage = document[number - 1].get_textpage()
        found = find_tables(textpage, height, rules, pieces)  # type: ignore[arg-type]
    finally:
        document.close()
    kept = place(pieces, found, height) is not None  # type: ignore[arg-type]
    for table in found:
        print(f"=== {path.name} p. {number}{'' if kept else ' (keeps pypdf text)'}: {len(table.rows)} rows")
        for row in table.rows[:4]:
            print("    " + " | ".join(cell.replace("\n", " / ") for cell in row)[:160])
    return len(found)


if __name__ == "__main__":
    main()
