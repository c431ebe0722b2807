"""Regenerates docs/serve.png: `memagent serve`'s page for a real run, and docs/serve-quote.png: its
quote opened on its PDF page.

The trained code-word model of tests/data (no download) reads a generated 3-page PDF whose second
page gives the code word (the first seed whose run answers right and quotes the sentence), into a
fresh trace store; `memagent serve` shows it; Chromium draws the run's page and its quote's page.
Needs the test extra (pip install -e '.[test]'), testkit/ and Chromium (Debian: chromium-headless-shell),
from the repository's root:

    PYTHONPATH=. python docs/make_serve_shot.py [--out DIR]
"""

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from testkit.pages import answered_pdf, serving
from testkit.texts import REPO


def shoot(url: str, out: Path, size: tuple[int, int]) -> None:
    browser = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if browser is None:
        raise SystemExit("no headless Chromium: apt-get install chromium-headless-shell")
    with tempfile.TemporaryDirectory(prefix="memagent-shot-") as profile:
        subprocess.run(
            [
                browser,
                "--headless",
                "--disable-gpu",
                "--no-sandbox",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                f"--window-size={size[0]},{size[1]}",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        home, docs = Path(tmp) / "home", Path(tmp) / "docs"
        home.mkdir()
        docs.mkdir()
        record = answered_pdf(docs, home)
        with serving(home, docs) as url:
            shoot(f"{url}/runs/{record['trace']}", out / "serve.png", (1100, 900))
            shoot(f"{url}/runs/{record['trace']}/quotes/1", out / "serve-quote.png", (1100, 560))
    print(f"run {record['trace'][:8]}: {record['answer']!r}, quoted {record['quotes'][0]['location']}")


if __name__ == "__main__":
    main()
