"""Tests for memagent_cli.ingest.web: web pages (main content, sections) and RSS/Atom feeds.

Pages and feeds are written here as files and read both by the reader functions and by the full
path (collect_sources / read_source). No test touches the network: a socket that tries to
connect fails the test.
"""

from __future__ import annotations

import base64
import io
import os
import re
import time
from pathlib import Path

import pytest
from helpers import read_path

from memagent_cli.errors import MemagentError
from memagent_cli.ingest.base import Place, ReadContext
from memagent_cli.ingest.web import html_to_text, read_feed, read_html

pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def parts_of(reader, data: bytes, name: str) -> tuple[list, list[str]]:
    notes: list[str] = []
    return list(reader(io.BytesIO(data), ReadContext(name, name, notes.append))), notes


# --------------------------------------------------------------------------------------------
# Web pages

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

FONT = "d09GMgABAAAAAAj4AA0AAAAAEXQAAAikAAEAAAAA" * 20

ARTICLE = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>The Lighthouse Keepers of Skerryvore | Coastal Heritage Magazine</title>
<link rel="stylesheet" href="http://192.0.2.1/site.css">
<style>
@font-face {{ font-family: Brand; src: url(data:font/woff2;base64,{FONT}) format("woff2"); }}
.cookie {{ position: fixed; bottom: 0; }}
</style>
<script>var tracker = "UA-0000-TRACKER"; document.write("script text");</script>
</head>
<body>
<div class="cookie-banner" id="cookie-consent"><p>We use cookies to improve your experience. By continuing to browse
you accept our cookie policy.</p><button>Accept all cookies</button></div>
<header class="site-header">
  <a href="/"><img src="data:image/png;base64,{PIXEL}" alt="Coastal Heritage logo"></a>
  <nav class="main-nav"><ul><li><a href="/">Home</a></li><li><a href="/history">History</a></li>
  <li><a href="/shop">Shop</a></li><li><a href="/subscribe">Subscribe</a></li></ul></nav>
</header>
<main>
<article class="post">
  <h1>The Lighthouse Keepers of Skerryvore</h1>
  <p>Twelve miles west of Tiree, the Skerryvore lighthouse rises 48 metres from a reef that claimed more than
  thirty ships before it was lit in 1844. For over a century, three keepers at a time lived inside its granite
  tower, tending the lamp through gales that threw spray over the lantern gallery.</p>
  <p>Alan Stevenson designed the tower with a hyperbolic profile so that its weight would sit low on the rock.
  The granite was quarried on Mull, dressed on Hynish, and shipped out in calm weather only.</p>
  <h2>Life on the rock</h2>
  <p>A keeper's watch lasted four hours. He trimmed the wicks, wound the clockwork that turned the lens, and
  logged the weather every three hours. In the winter of 1872 the keepers waited eleven weeks for relief.</p>
  <figure><img src="http://192.0.2.1/tower.jpg" alt="The tower at dusk"></figure>
  <h2>The fire of 1954</h2>
  <p>On the night of 16 March 1954 a fire broke out in the tower and spread up the central stair. The three
  keepers escaped onto the rock and were taken off by a fishing boat the next morning.</p>
  <h3>Keepers' rota in 1953</h3>
  <table>
    <tr><th>Keeper</th><th>Watch</th></tr>
    <tr><td>Principal keeper</td><td>20:00–00:00</td></tr>
    <tr><td>First assistant</td><td>00:00–04:00</td></tr>
  </table>
  <h2>Automation</h2>
  <p>The Northern Lighthouse Board automated Skerryvore in 1994, and the last keepers left the rock on the 31st
  of March that year. The shore station at Hynish is now a museum.</p>
  <ul><li>Height: 48 metres</li><li>First lit: 1 February 1844</li></ul>
</article>
<section class="comments"><h3>Comments</h3><div class="comment"><p>My grandfather served there!</p></div></section>
</main>
<aside class="sidebar"><h3>Most read</h3>
  <ul><li><a href="/a">Ten harbours to visit this summer</a></li><li><a href="/b">Puffin season on Lunga</a></li></ul>
  <div class="ad">Advertisement: Book your island ferry today and save 20%</div></aside>
<footer><p>&copy; 2023 Coastal Heritage Magazine Ltd. All rights reserved.</p>
  <a href="/privacy">Privacy policy</a></footer>
<iframe src="http://192.0.2.1/ad"></iframe>
<script src="http://192.0.2.1/analytics.js"></script>
</body>
</html>
"""

ARTICLE_PLACES = [
    Place("section", 1, "The Lighthouse Keepers of Skerryvore"),
    Place("section", 2, "Life on the rock"),
    Place("section", 3, "The fire of 1954"),
    Place("section", 4, "Keepers' rota in 1953"),
    Place("section", 5, "Automation"),
]


def test_a_page_is_its_main_content_in_sections_at_its_headings(in_tmp):
    path = in_tmp / "article.html"
    path.write_text(ARTICLE, encoding="utf-8")
    text, places, notes = read_path(path)
    assert places == ARTICLE_PLACES
    assert notes == []
    sections = text.split("\n\n#")
    assert sections[0].startswith("# The Lighthouse Keepers of Skerryvore\n\nTwelve miles west of Tiree,")
    assert "## Life on the rock\n\nA keeper's watch lasted four hours." in text
    assert "### Keepers' rota in 1953\n\nKeeper | Watch\nPrincipal keeper | 20:00–00:00\nFirst assistant | 00:00–04:00" in text
    assert text.endswith("The shore station at Hynish is now a museum.\n\n- Height: 48 metres\n- First lit: 1 February 1844")
    # Source line breaks inside a paragraph are kept as trafilatura keeps them; nothing else is.
    for chrome in ("cookie", "Home", "Subscribe", "Most read", "Advertisement", "Puffin", "UA-0000", "script text",
                   "Privacy", "©", "grandfather", "Comments", "logo", "dusk", "base64", "d09GMg", "font-face"):  # fmt: skip
        assert chrome not in text, chrome


def test_the_reader_gives_the_same_parts(in_tmp):
    parts, notes = parts_of(read_html, ARTICLE.encode(), "article.html")
    assert [p.place for p in parts] == ARTICLE_PLACES
    assert not any(p.joined for p in parts)
    assert parts[3].text == (
        "### Keepers' rota in 1953\n\nKeeper | Watch\nPrincipal keeper | 20:00–00:00\nFirst assistant | 00:00–04:00"
    )


def test_the_title_starts_the_text_when_no_heading_repeats_it():
    page = ARTICLE.replace("<title>The Lighthouse Keepers of Skerryvore | Coastal Heritage Magazine</title>",
                           "<title>Coastal Heritage &amp; History</title>")  # fmt: skip
    parts, _ = parts_of(read_html, page.encode(), "a.html")
    assert parts[0].text == "# Coastal Heritage & History"
    assert parts[0].place == Place()
    assert [p.place for p in parts[1:]] == ARTICLE_PLACES


SMALL_PAGE = b"""<html><head><title>FAQ - Widget Co</title></head><body>
<nav><a href="/">Home</a> <a href="/faq">FAQ</a></nav>
<header><p>Widget Co: widgets since 1901</p></header>
<div id="content">
<h1>Frequently asked questions</h1>
<dl><dt>How long is the warranty?</dt><dd>Two years.</dd><dt>Can I return a widget?</dt><dd>Yes, within 30 days.</dd></dl>
<h2>Opening hours</h2>
<ul><li>Mon-Fri 9-17</li><li>Sat 10-14</li></ul>
<p>Our store is at 12 High Street.<br>Phone: 0123 456 789</p>
</div>
<script>alert("x")</script>
<footer>Copyright Widget Co</footer>
</body></html>"""


def test_a_small_page_is_read_whole_without_navigation_header_or_footer(in_tmp):
    # trafilatura finds no main content in so little text and would run it all together.
    path = in_tmp / "faq.htm"
    path.write_bytes(SMALL_PAGE)
    text, places, notes = read_path(path)
    assert text == (
        "# FAQ - Widget Co\n\n"
        "# Frequently asked questions\n\n- How long is the warranty?\n  Two years.\n- Can I return a widget?\n"
        "  Yes, within 30 days.\n\n"
        "## Opening hours\n\n- Mon-Fri 9-17\n- Sat 10-14\n\nOur store is at 12 High Street.\nPhone: 0123 456 789"
    )
    assert places == [Place(), Place("section", 1, "Frequently asked questions"), Place("section", 2, "Opening hours")]
    assert notes == []


def test_a_page_that_is_all_list_is_read():
    page = b"<html><head><title>Links</title></head><body><ul><li><a href='a'>Alpha</a></li><li><a href='b'>Beta</a>"
    page += b"</li><li><a href='c'>Gamma</a></li></ul></body></html>"
    parts, _ = parts_of(read_html, page, "links.html")
    assert [(p.text, p.place) for p in parts] == [("# Links\n\n- Alpha\n- Beta\n- Gamma", Place())]


@pytest.mark.parametrize(
    "page",
    [
        b"",
        b"   \n",
        b"<html><head><title> </title><script>var x = 1;</script></head><body><img src='a.png'><br></body></html>",
    ],
)
def test_a_page_without_visible_text_yields_nothing(page):
    parts, notes = parts_of(read_html, page, "empty.html")
    assert parts == [] and notes == []


def test_the_declared_charset_decodes_the_page():
    page = '<html><head><meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1"><title>Caf\xe9</title>'
    page += "</head><body><h1>Men\xfc</h1><p>Cr\xe8me br\xfbl\xe9e \u2013 3,50 \u20ac</p></body></html>"
    parts, notes = parts_of(read_html, page.encode("cp1252"), "menu.html")
    # iso-8859-1 means windows-1252 on the web: the dash and the euro sign are read as such.
    assert "\n\n".join(p.text for p in parts) == "# Café\n\n# Menü\n\nCrème brûlée – 3,50 €"
    assert notes == []


def test_an_xhtml_page_with_an_xml_declaration(in_tmp):
    page = '<?xml version="1.0" encoding="iso-8859-15"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
    page += "<title>Prix</title></head><body><h1>Prix</h1><p>Le prix est de 5 \u20ac.<br/>Merci.</p></body></html>"
    path = in_tmp / "prix.xhtml"
    path.write_bytes(page.encode("iso-8859-15"))
    text, places, notes = read_path(path)
    assert text == "# Prix\n\nLe prix est de 5 €.\nMerci."
    assert places == [Place("section", 1, "Prix")]


def test_an_undeclared_encoding_is_detected_with_a_note():
    body = "Der Bäcker verkauft frische Brötchen, Brezeln und Kuchen. Die Straße ist schön und grün. " * 4
    page = f"<html><body><h1>Bäckerei</h1><p>{body}</p></body></html>".encode("cp1252")
    parts, notes = parts_of(read_html, page, "b.html")
    assert "Brötchen" in parts[-1].text
    assert len(notes) == 1 and notes[0].startswith("b.html is not UTF-8 and declares no encoding; decoded as ")


def test_megabytes_of_inline_base64_are_dropped_quickly():
    image = base64.b64encode(os.urandom(1_500_000)).decode()
    font = base64.b64encode(os.urandom(800_000)).decode()
    page = (
        f'<html><head><title>Report</title><style>@font-face {{ src: url("data:font/woff2;base64,{font}"); }}</style>'
        f'</head><body><h1>Quarterly report</h1><p>Revenue grew by 12 percent.</p><img src="data:image/png;base64,{image}">'
        f'<p>Costs fell.</p><p style="background: url(data:image/gif;base64,{image[:500_000]})">Outlook stable.</p>'
        "</body></html>"
    ).encode()
    assert len(page) > 3_000_000
    start = time.perf_counter()
    parts, _ = parts_of(read_html, page, "report.html")
    elapsed = time.perf_counter() - start
    text = "\n\n".join(p.text for p in parts)
    assert text == "# Report\n\n# Quarterly report\n\nRevenue grew by 12 percent.\n\nCosts fell.\n\nOutlook stable."
    assert elapsed < 10, elapsed  # about 0.1 s; generous for a busy machine


@pytest.mark.parametrize(
    "page",
    [
        b"<html><body><h1>Broken<p>First para <b>bold <i>italic<div><p>Second para<table><tr><td>cell",
        b"<p>Junk \x00\x01\x02\xff\xfe\x80 in the page</p><p>more \x1b[31m text</p>" + bytes(range(256)) * 20,
        b"<html><body>" + b"<div>" * 5000 + b"deep text" + b"</div>" * 10 + b"</body></html>",
        b"\xff\xfe<\x00h\x00t\x00m\x00l\x00>\x00",  # a byte-order mark and the start of a page
        b"<!DOCTYPE html><html><head><title>T</title></head></html>",
    ],
)
def test_malformed_html_does_not_fail(page):
    parts, _ = parts_of(read_html, page, "bad.html")
    for part in parts:
        assert "\x00" not in part.text


def test_malformed_html_keeps_its_text():
    page = b"<html><body><h1>Broken page<p>First para <b>bold <i>italic</p><div><p>Second para \x00\x01 end"
    parts, _ = parts_of(read_html, page, "bad.html")
    assert "\n\n".join(p.text for p in parts) == "# Broken page\n\nFirst para bold italic\n\nSecond para end"


def test_a_page_is_never_fetched_from(monkeypatch):
    import trafilatura
    import trafilatura.downloads

    def no_fetch(*args, **kwargs):
        raise AssertionError("fetch_url called")

    monkeypatch.setattr(trafilatura, "fetch_url", no_fetch)
    monkeypatch.setattr(trafilatura.downloads, "fetch_url", no_fetch)
    page = b'<html><head><base href="http://192.0.2.1/"><link rel="import" href="http://192.0.2.1/x.html"></head>'
    page += b'<body><h1>Remote</h1><p>Text. <img src="http://192.0.2.1/a.png"></p><iframe src="http://192.0.2.1/"></iframe>'
    page += b'<object data="http://192.0.2.1/o"></object></body></html>'
    parts, _ = parts_of(read_html, page, "remote.html")
    assert "\n\n".join(p.text for p in parts) == "# Remote\n\nText."


def test_section_labels_are_short_single_lines():
    heading = "A very long heading " * 8
    page = f"<html><body><h2>Results\n   and <em>methods</em> ¶</h2><p>One.</p><h3>{heading}</h3><p>Two.</p></body></html>"
    parts, _ = parts_of(read_html, page.encode(), "l.html")
    assert parts[0].place == Place("section", 1, "Results and methods")
    assert parts[0].text == "## Results and methods\n\nOne."
    assert parts[1].place.label == heading[:79].rstrip() + "…"
    assert len(parts[1].place.label) <= 80


def test_html_to_text_keeps_structure_and_drops_markup():
    fragment = """<h2>Shopping</h2><p>Buy <b>these</b>
    things:</p><ol start="3"><li>Milk</li><li>Bread<ul><li>white</li><li>brown</li></ul></li></ol>
    <pre>  indented
      code</pre><blockquote>Quoted<br>line</blockquote><table><caption>Prices</caption>
    <tr><th>Item</th><th>Price</th></tr><tr><td><p>Milk</p></td><td>1.20</td></tr></table>
    <script>no()</script><style>p{}</style><img src="x.png" alt="an image"><p hidden>secret</p>"""
    assert html_to_text(fragment) == (
        "## Shopping\n\nBuy these things:\n\n3. Milk\n4. Bread\n  - white\n  - brown\n\n"
        "  indented\n      code\n\nQuoted\nline\n\nPrices\nItem | Price\nMilk | 1.20"
    )


# --------------------------------------------------------------------------------------------
# Feeds

RSS = b"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel>
<title>Harbour News</title>
<link>http://192.0.2.1/</link>
<description>News from the harbour</description>
<item>
  <title>Ferry timetable changes</title>
  <link>http://192.0.2.1/ferry</link>
  <pubDate>Tue, 05 Mar 2024 09:00:00 GMT</pubDate>
  <description>&lt;p&gt;From &lt;b&gt;April&lt;/b&gt; the ferry leaves at 7:30.&lt;/p&gt;&lt;script&gt;evil()&lt;/script&gt;
  &lt;ul&gt;&lt;li&gt;Mon&lt;/li&gt;&lt;li&gt;Fri&lt;/li&gt;&lt;/ul&gt;</description>
</item>
<item>
  <title>Lifeboat day</title>
  <description>Plain text: the lifeboat open day is on Saturday.</description>
</item>
</channel></rss>
"""


def test_an_rss_feed_is_its_title_then_one_section_per_item(in_tmp):
    path = in_tmp / "news.rss"
    path.write_bytes(RSS)
    text, places, notes = read_path(path)
    assert places == [Place(), Place("section", 1, "Ferry timetable changes"), Place("section", 2, "Lifeboat day")]
    assert text == (
        "# Harbour News\n\nNews from the harbour\n\n"
        "# Ferry timetable changes\nDate: Tue, 05 Mar 2024 09:00:00 GMT\nLink: http://192.0.2.1/ferry\n\n"
        "From April the ferry leaves at 7:30.\n\n- Mon\n- Fri\n\n"
        "# Lifeboat day\n\nPlain text: the lifeboat open day is on Saturday."
    )
    assert notes == []


def test_an_xml_file_holding_a_feed_is_read_as_one(in_tmp):
    path = in_tmp / "news.xml"
    path.write_bytes(RSS)
    text, places, _ = read_path(path)
    assert len(places) == 3 and "Ferry timetable changes" in text


ATOM = """<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title type="html">Lab &lt;i&gt;notes&lt;/i&gt;</title>
  <updated>2024-01-02T10:00:00Z</updated>
  <entry>
    <title>Result one</title>
    <link href="http://192.0.2.1/1"/>
    <updated>2024-01-02T10:00:00Z</updated>
    <summary>A short summary.</summary>
    <content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><h2>Method</h2><p>We measured 42 samples.</p></div></content>
  </entry>
  <entry>
    <title type="html">Result &lt;b&gt;two&lt;/b&gt; – café</title>
    <content type="html">&lt;p&gt;No change.&lt;/p&gt;</content>
  </entry>
</feed>
"""


def test_an_atom_feed_reads_content_over_summary(in_tmp):
    path = in_tmp / "lab.atom"
    path.write_bytes(ATOM.encode())
    text, places, _ = read_path(path)
    assert places == [Place(), Place("section", 1, "Result one"), Place("section", 2, "Result two – café")]
    assert text == (
        "# Lab notes\n\n"
        "# Result one\nDate: 2024-01-02T10:00:00Z\nLink: http://192.0.2.1/1\n\n## Method\n\nWe measured 42 samples.\n\n"
        "# Result two – café\n\nNo change."
    )


def test_a_malformed_feed_with_items_is_read_with_a_note():
    broken = RSS.replace(b"<title>Lifeboat day</title>", b"<title>Lifeboat & day</title>").replace(b"</channel></rss>", b"")
    parts, notes = parts_of(read_feed, broken, "news.rss")
    assert [p.place.label for p in parts] == [None, "Ferry timetable changes", "Lifeboat & day"]
    assert len(notes) == 1
    assert notes[0].startswith("news.rss: the feed is not well-formed XML (") and "read what a lenient parse found" in notes[0]


@pytest.mark.parametrize("data", [b"", b"<rss><channel></channel></rss>", b"\x00\x01binary\xff" * 50, b"<rss><chan"])
def test_a_feed_with_nothing_readable_is_refused_in_one_line(in_tmp, data):
    with pytest.raises(MemagentError) as caught:
        parts_of(read_feed, data, "bad.rss")
    message = caught.value.message
    assert message.startswith("Cannot read feed bad.rss: ")
    assert "\n" not in message


def test_a_feed_naming_a_file_does_not_read_that_file(in_tmp):
    # feedparser opens bytes that name an existing file as that file; memagent hands it the file.
    secret = in_tmp / "secret.rss"
    secret.write_bytes(RSS)
    path = in_tmp / "pointer.rss"
    path.write_bytes(str(secret).encode())
    with pytest.raises(MemagentError, match=r"^Cannot read feed pointer\.rss: "):
        read_path(path)


def test_feed_entities_are_not_expanded_from_outside(in_tmp):
    outside = in_tmp / "outside.txt"
    outside.write_text("OUTSIDE-SECRET")
    feed = f"""<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY x SYSTEM "file://{outside}">]>
<rss version="2.0"><channel><title>T</title><item><title>I</title><description>a &x; b</description></item></channel></rss>"""
    parts, _ = parts_of(read_feed, feed.encode(), "e.rss")
    assert all("OUTSIDE-SECRET" not in p.text for p in parts)
    assert re.search(r"\bI\b", parts[-1].text)
