"""memagent's benchmarks, one command:

    python -m benchmarks list                 every benchmark, its module and when it last ran
    python -m benchmarks run B2 [--quick]     measure one (or several); its options: run B2 --help
    python -m benchmarks doc [--check]        docs/PERFORMANCE.md from benchmarks/results/
    python -m benchmarks doc --only B2        one benchmark's rows and section, on stdout

`run` writes benchmarks/results/B2.json and regenerates the page; `--quick` (fewer rounds, smaller
inputs, for a first look) prints its numbers and writes them to --out only, so a quick look never
replaces the numbers the page shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness import doc, results
from benchmarks.harness.registry import BENCHMARKS, module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0].rstrip(":"))
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every benchmark, its module and when it last ran")
    run = commands.add_parser("run", help="measure benchmarks (options after the names go to each)", add_help=False)
    run.add_argument("names", nargs="+", metavar="NAME")
    check = commands.add_parser("doc", help="regenerate docs/PERFORMANCE.md from the results")
    check.add_argument("--check", action="store_true", help="exit 1 when the page is not what the results make")
    check.add_argument("--only", metavar="NAME", help="print one benchmark's rows and section instead")
    args, rest = parser.parse_known_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "doc":
        if args.only:
            print(doc.render_one(args.only.upper()))
            return 0
        if args.check:
            same = doc.PAGE.exists() and doc.PAGE.read_text(encoding="utf-8") == doc.render()
            print("docs/PERFORMANCE.md is up to date" if same else "docs/PERFORMANCE.md differs: run `python -m benchmarks doc`")
            return 0 if same else 1
        print("docs/PERFORMANCE.md " + ("rewritten" if doc.write() else "unchanged"))
        return 0
    names = [n for n in args.names if not n.startswith("-")]
    rest = [n for n in args.names if n.startswith("-")] + rest
    for name in names:
        _run(name, rest)
    return 0


def _list() -> int:
    for name, mod in BENCHMARKS.items():  # each module's own file, or its package's folder
        found = results.load(name)
        when = found["when"] if found else "never run"
        where = Path(module(name).__file__ or mod).relative_to(results.REPO / "benchmarks")
        shown = f"{where.parent}/" if where.name == "__init__.py" else str(where)
        print(f"{name:4} {shown:20} {module(name).TITLE}  [{when}]")
    return 0


def _run(name: str, argv: list[str]) -> None:
    bench = module(name)
    name = name.upper()
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks run {name}", description=bench.__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--quick", action="store_true", help=f"a first look: {' '.join(bench.QUICK) or 'as the full run'}")
    parser.add_argument("--out", type=Path, help="write the results file here instead of benchmarks/results/")
    bench.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:  # QUICK first, so options given on the command line still win
        args = parser.parse_args([*bench.QUICK, *argv])
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("quick", "out")}
    metrics = bench.measure(args)
    previous = results.load(name)
    record = results.record(name, {**options, "quick": args.quick}, metrics, previous)
    rows = bench.rows(record["metrics"], results.Results(record))
    record["targets"] = results.targets(rows)
    for row in rows:
        print(f"{name:4} {row.what}: {row.result}" + (f" (target {row.target})" if row.target != "—" else ""))
    if args.out or args.quick:
        if args.out:
            print(f"wrote {results.save(record, args.out)}")
        return
    results.save(record)
    doc.write()
    print(f"wrote {results.path(name).relative_to(results.REPO)} and docs/PERFORMANCE.md", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
