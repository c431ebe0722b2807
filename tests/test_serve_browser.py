"""`memagent serve` in a real browser: Debian's chromium driven by Selenium through chromium-driver
(.ci/run installs both; with CI set a missing browser fails), over a real trace store and the trained
code-word model. Open the list, a run and a quote, and check in a screenshot's pixels that the mark on
the page image covers the quote's glyphs; ask a question and a follow-up; stop a reading and resume it;
see a step recorded by another `memagent ask` process appear on an open page."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from helpers import png_pixels, spawn_memagent, words

from testkit.codeword import QUESTION
from testkit.pages import FACT_PAGE, answered_pdf, memagent, serving
from testkit.texts import CODEWORD_ASK

pytestmark = pytest.mark.slow
WAIT = 180  # seconds a page has to show what it must, on a machine busy with other tests


def driver_paths() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    message = "chromium and chromium-driver are not installed: apt-get install chromium chromium-driver"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver = driver_paths()
    with tempfile.TemporaryDirectory(prefix="memagent-selenium-") as profile:
        options = Options()
        options.binary_location = chromium
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1200,1400",
            f"--user-data-dir={profile}",
            "--force-device-scale-factor=1",
        ):
            options.add_argument(flag)
        chrome = webdriver.Chrome(service=Service(driver), options=options)
        chrome.set_page_load_timeout(WAIT)
        try:
            yield chrome
        finally:
            chrome.quit()


@pytest.fixture
def store(tmp_path):
    home, docs = tmp_path / "home", tmp_path / "docs"
    home.mkdir()
    docs.mkdir()
    return home, docs


def until(chrome, test, what: str):
    """`test()` once it is true (a page that reloads meanwhile leaves stale elements: tried again)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(chrome, WAIT, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,))
    return wait.until(lambda _: test(), message=what)


def found(chrome, css: str):
    from selenium.webdriver.common.by import By

    return chrome.find_elements(By.CSS_SELECTOR, css)


def status(chrome) -> str:
    """The run page's status, "" while the page is between loads."""
    shown = found(chrome, "#status")
    return shown[0].text if shown else ""


def glyph_boxes(pdf: Path, page: int, text: str) -> tuple[list[tuple[float, float, float, float]], tuple[float, float]]:
    """Each glyph box of `text` on `page` of `pdf` as fractions of the drawn page (left, top, right,
    bottom), found by PDFium's own search (not memagent's locating), and the page's size."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(pdf))
    sheet = document[page - 1]
    left, bottom, right, top = sheet.get_bbox()
    textpage = sheet.get_textpage()
    hit = textpage.search(text).get_next()
    assert hit is not None, "PDFium cannot find the quote"
    start, count = hit
    boxes = []
    for i in range(start, start + count):
        gl, gb, gr, gt = textpage.get_charbox(i)
        if gr > gl:
            boxes.append(
                (
                    (gl - left) / (right - left),
                    (top - gt) / (top - bottom),
                    (gr - left) / (right - left),
                    (top - gb) / (top - bottom),
                )
            )
    return boxes, (right - left, top - bottom)


def marked(pixel: bytes) -> bool:
    """The mark's translucent yellow over the white page (or over a glyph's grey)."""
    r, g, b = pixel[0], pixel[1], pixel[2]
    return r > 140 and g > 110 and b + 60 < g


def test_a_quote_opens_its_place_marked_over_its_glyphs(browser, store, tmp_path):
    home, docs = store
    record = answered_pdf(docs, home)
    quote = record["quotes"][0]
    with serving(home, docs) as url:
        browser.get(url + "/")
        (link,) = [a for a in found(browser, "table.runs a") if a.get_attribute("href").endswith(record["trace"])]
        link.click()
        until(browser, lambda: found(browser, "a.quote-link"), "the run's quotes")
        found(browser, "a.quote-link")[0].click()
        image = until(browser, lambda: found(browser, "figure.pdf-page img"), "the page image")[0]
        until(
            browser,
            lambda: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image),
            "the page drawn",
        )
        boxes, _ = glyph_boxes(docs / "report.pdf", FACT_PAGE, quote["text"])
        # the quote's line in view, then where the image is on the screen
        browser.execute_script(
            "window.scrollTo(0, arguments[0].getBoundingClientRect().top + window.scrollY"
            " + arguments[0].getBoundingClientRect().height * arguments[1] - 300)",
            image,
            boxes[0][1],
        )
        rect = browser.execute_script(
            "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.width, r.height]", image
        )
        shot = tmp_path / "quote.png"
        shot.write_bytes(browser.get_screenshot_as_png())
    width, height, rows = png_pixels(shot)  # one CSS pixel a screen pixel (--force-device-scale-factor=1)

    def pixel(fx: float, fy: float) -> bytes:
        x, y = int(rect[0] + fx * rect[2]), int(rect[1] + fy * rect[3])
        assert 0 <= x < width and 0 <= y < height, "the quote is out of the screenshot"
        return rows[y][x]

    covered = checked = 0
    for left, top, right, bottom in boxes:
        for fx in (left + (right - left) * k / 4 for k in range(1, 4)):
            for fy in (top + (bottom - top) * k / 4 for k in range(1, 4)):
                checked += 1
                covered += marked(pixel(fx, fy))
    assert covered / checked > 0.8, f"{covered} of {checked} points over the quote's glyphs are marked"
    line = boxes[0][3] - boxes[0][1]
    below = [pixel(left + (right - left) / 2, bottom + 2.5 * line) for left, _, right, bottom in boxes]
    assert not any(marked(p) for p in below), "the mark reaches the line below the quote"


def ask_on_the_page(browser, url: str, document: str, question: str) -> str:
    """Ask `question` about `document` from the ask form; the run page's address once it is there."""
    from selenium.webdriver.common.by import By

    browser.get(url + "/ask")
    (box,) = [b for b in found(browser, "input[name=path]") if b.get_attribute("value").endswith("/" + document)]
    box.click()
    browser.find_element(By.ID, "question").send_keys(question)
    browser.find_element(By.ID, "ask").click()
    until(browser, lambda: "/runs/" in browser.current_url, "the run's page")
    return browser.current_url


def test_asking_and_following_up_on_the_page(browser, store):
    from selenium.webdriver.common.by import By

    home, docs = store
    record = answered_pdf(docs, home)
    with serving(home, docs) as url:
        first = ask_on_the_page(browser, url, "report.pdf", "Which code word does it give?")
        answer = until(browser, lambda: found(browser, "div.answer:not(.none)"), "the answer")[0]
        assert answer.text == record["answer"]
        assert len(found(browser, "li.step")) == len(record["steps"])
        browser.find_element(By.CSS_SELECTOR, "form.follow input[name=question]").send_keys("And the code word again?")
        browser.find_element(By.ID, "follow").click()
        until(browser, lambda: "/runs/" in browser.current_url and browser.current_url != first, "the follow-up's page")
        crumbs = until(browser, lambda: found(browser, "p.crumbs"), "the follow-up's place")[0].text
        assert "turn 2" in crumbs
        until(browser, lambda: found(browser, "div.answer:not(.none)"), "the follow-up's answer")


def test_a_reading_stopped_on_the_page_resumes_from_where_it_stopped(browser, store):
    from selenium.webdriver.common.by import By

    home, docs = store
    (docs / "long.txt").write_text(words(12000), encoding="utf-8")
    with serving(home, docs) as url:
        ask_on_the_page(browser, url, "long.txt", QUESTION)
        until(browser, lambda: len(found(browser, "li.step")) >= 2, "steps arriving")
        browser.execute_script("window.stillHere = true")  # no reload: the steps came as events
        shown = len(found(browser, "li.step"))
        until(browser, lambda: len(found(browser, "li.step")) > shown, "more steps arriving")
        assert browser.execute_script("return window.stillHere === true")
        browser.find_element(By.ID, "stop").click()
        until(browser, lambda: found(browser, "#resume"), "the resume button of the stopped run")
        assert until(browser, lambda: status(browser), "the run's status") == "interrupted"
        stopped = len(found(browser, "li.step"))
        assert stopped >= 2
        run = browser.current_url.rsplit("/", 1)[-1]
        browser.find_element(By.ID, "resume").click()
        until(browser, lambda: status(browser) == "complete", "the run completed")
        assert browser.current_url.endswith("/runs/" + run)  # the same run, gone on with
    steps = json.loads(memagent("traces", "show", run, "--json", home=home, cwd=docs).stdout)["steps"]
    assert [s["index"] for s in steps] == list(range(1, len(steps) + 1)) and len(steps) > stopped


def test_a_step_recorded_by_another_process_appears_on_an_open_page(browser, store):
    home, docs = store
    fifo = docs.parent / "pipe"
    os.mkfifo(fifo)
    env = {"MEMAGENT_HOME": str(home), "NO_COLOR": "1"}
    reader = spawn_memagent("ask", fifo, QUESTION, *CODEWORD_ASK, "--temperature", "0", env=env)
    text = words(8000).encode()
    try:
        with serving(home, docs) as url, open(fifo, "wb") as pipe:
            pipe.write(text[:20000])
            pipe.flush()
            deadline = time.monotonic() + WAIT
            while True:
                listed = json.loads(memagent("traces", "list", "--json", home=home, cwd=docs).stdout)["runs"]
                if listed and listed[0]["status"] == "running" and listed[0]["step_count"] > 0:
                    break
                assert time.monotonic() < deadline, "the other process recorded no step"
                time.sleep(0.2)
            run = listed[0]["id"]
            browser.get(f"{url}/runs/{run}")
            browser.execute_script("window.stillHere = true")
            before = len(found(browser, "li.step"))
            pipe.write(text[20000:])
            pipe.flush()
            until(browser, lambda: len(found(browser, "li.step")) > before, "the other process's new steps")
            assert browser.execute_script("return window.stillHere === true")
    finally:
        reader.wait(timeout=WAIT)
    assert reader.returncode == 0, reader.stderr.read()
