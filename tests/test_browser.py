"""Open every page of the built book in headless Chromium and check that it really renders.

Checks, per page: math is typeset by the bundled (offline) MathJax and no raw LaTeX is left
in the text; every image has loaded; theorem and exercise blocks written in the source are
present in the page; every internal link points to an existing page and anchor; every Colab
and Binder link (header launch buttons and the bar under the title) opens the page's committed
notebook ``notebooks/<page>.ipynb``. For one chapter, the header launch buttons are clicked
in the browser and the address each one opens is checked.

Needs the built book (``make book``) and Debian's ``chromium``. The test skips when either
is missing, unless ``TOPICMECH_REQUIRE_BROWSER=1`` (set by CI), which turns the skip into a
failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, unquote, urldefrag, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
REQUIRED = os.environ.get("TOPICMECH_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _skip_or_fail(reason: str) -> None:
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def _is_stale() -> bool:
    """True when a book source is newer than the built index (the build is out of date)."""
    index = HTML / "index.html"
    if not index.exists():
        return True
    built = index.stat().st_mtime
    sources = list((ROOT / "book").glob("*.md")) + [ROOT / "_config.yml", ROOT / "_toc.yml"]
    return any(p.stat().st_mtime > built for p in sources)


def _pages() -> list[Path]:
    if not HTML.is_dir() or (_is_stale() and not REQUIRED):
        return []
    return sorted(p for p in HTML.rglob("*.html") if "_static" not in p.parts and p.name not in ("search.html", "genindex.html"))


class _Links(HTMLParser):
    """Collect ``href`` targets and element ids of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        d = dict(attrs)
        if d.get("id"):
            self.ids.add(d["id"])
        if tag == "a" and d.get("href"):
            self.hrefs.append(d["href"])


@functools.cache
def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def broken_internal_links(page: Path, root: Path = HTML) -> list[str]:
    """Internal links of ``page`` whose target file or anchor does not exist."""
    broken = []
    for href in _parse(page).hrefs:
        url = urlparse(href)
        if url.scheme or href.startswith(("mailto:", "javascript:", "//")):
            continue
        target_path, anchor = urldefrag(href)
        target = (page.parent / unquote(target_path)).resolve() if target_path else page
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            broken.append(f"{href} (no file)")
            continue
        if anchor and target.suffix == ".html" and anchor not in _parse(target).ids:
            broken.append(f"{href} (no anchor)")
    return broken


LAUNCHERS = {"colab.research.google.com": "Colab", "mybinder.org": "Binder"}


def launch_target(url: str) -> str | None:
    """The repository path that a Colab or Binder URL opens; None for any other URL.

    Colab: ``https://colab.research.google.com/github/ORG/REPO/blob/BRANCH/PATH``;
    Binder: ``https://mybinder.org/v2/gh/ORG/REPO/BRANCH?urlpath=lab/tree/PATH``.
    """
    u = urlparse(url)
    if u.netloc == "colab.research.google.com":
        parts = u.path.strip("/").split("/")
        return "/".join(parts[5:]) if parts[:1] == ["github"] and parts[3:4] == ["blob"] else ""
    if u.netloc == "mybinder.org":
        urlpath = parse_qs(u.query).get("urlpath", [""])[0]
        return urlpath.split("/tree/", 1)[1] if "/tree/" in urlpath else ""
    return None


def launch_links(page: Path) -> list[tuple[str, str]]:
    """(href, opened repository path) of every Colab and Binder link of ``page``."""
    return [(h, t) for h in _parse(page).hrefs if (t := launch_target(h)) is not None]


def _source_of(page: Path) -> Path | None:
    rel = page.relative_to(HTML).with_suffix(".md")
    src = ROOT / rel
    return src if src.exists() else None


def test_book_is_built() -> None:
    if not _pages():
        _skip_or_fail("no up-to-date book in _build/html: run `make book` first")
    assert (HTML / "book" / "intro.html").exists()


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(HTML)))
def test_internal_links(page: Path) -> None:
    assert broken_internal_links(page) == []


def _chapters() -> list[Path]:
    return [p for p in _pages() if launch_links(p)]


@pytest.mark.parametrize("page", _chapters(), ids=lambda p: str(p.relative_to(HTML)))
def test_launch_links_open_committed_notebooks(page: Path) -> None:
    expected = f"notebooks/{page.stem}.ipynb"
    assert (ROOT / expected).exists(), f"{expected} is not committed (scripts/make_notebooks.py)"
    wrong = [href for href, target in launch_links(page) if target != expected]
    assert wrong == [], f"launch links that do not open {expected}: {wrong}"


def test_launch_target_parses_both_launchers() -> None:
    colab = "https://colab.research.google.com/github/o/r/blob/main/notebooks/a.ipynb"
    binder = "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/notebooks/a.ipynb"
    assert launch_target(colab) == launch_target(binder) == "notebooks/a.ipynb"
    assert launch_target("https://github.com/o/r/blob/main/book/a.md") is None


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM:
        _skip_or_fail("chromium is not installed (apt-get install chromium)")
    if not _pages():
        _skip_or_fail("no built book in _build/html: run `make book` first")
    sync_api = pytest.importorskip("playwright.sync_api")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep the test output readable
            pass

    handler = functools.partial(Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield b, f"http://127.0.0.1:{server.server_address[1]}"
        b.close()
    server.shutdown()


RAW_TEX = re.compile(
    r"\\(frac|mathbb|mathrm|rm|sum|top|to|infty|alpha|beta|gamma|lambda|Sigma|tau|left|right|begin)\b|\$\$"
)
# the page's prose: the main column without code, outputs and typeset math (where a
# backslash is code, not TeX left untypeset)
PROSE_JS = """() => {
  const main = document.querySelector('main').cloneNode(true);
  main.querySelectorAll('pre, code, mjx-container, script, style').forEach(e => e.remove());
  return main.innerText;
}"""
# every code block, printed output, table and displayed equation that is wider than the
# article column, or scrolls inside it, at the reader's 1280 px
OVERFLOW_JS = """() => {
  const art = document.querySelector('article.bd-article') || document.querySelector('main');
  const right = art.getBoundingClientRect().right + 1;
  const out = [];
  for (const el of document.querySelectorAll('pre, table, mjx-container[display="true"]')) {
    if (el.offsetParent === null) continue;            // not shown (a closed dropdown)
    const r = el.getBoundingClientRect();
    if (el.scrollWidth > el.clientWidth + 2 || r.right > right) {
      const text = (el.innerText || '').replace(/\\s+/g, ' ').slice(0, 60);
      out.push(`${el.tagName.toLowerCase()} ${el.scrollWidth} px in ${el.clientWidth} px: ${text}`);
    }
  }
  return out;
}"""


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(HTML)))
def test_page_renders(browser, page: Path) -> None:
    b, base = browser
    ctx = b.new_context()
    # Nothing may leave the machine: block every request that is not to our server.
    ctx.route(re.compile(r"^(?!http://127\.0\.0\.1).*"), lambda route: route.abort())
    tab = ctx.new_page()
    tab.set_viewport_size({"width": 1280, "height": 900})
    html_source = page.read_text(encoding="utf-8")
    redirect = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', html_source)
    if redirect:
        # a redirect (the root index.html): it must lead to a built page, which is tested
        # on its own; reading this tab would race the redirect
        target = (page.parent / redirect.group(1)).resolve()
        assert target.exists(), f"{page.name} redirects to a missing page {redirect.group(1)}"
        ctx.close()
        return
    tab.goto(f"{base}/{page.relative_to(HTML).as_posix()}", wait_until="load")
    has_math = 'class="math' in html_source
    if has_math:
        tab.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=20000)
        tab.evaluate("() => MathJax.startup.promise")
        assert tab.locator("mjx-container").count() > 0, "math present but not typeset"
        assert tab.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"
    text = tab.evaluate(PROSE_JS)
    raw = [f"raw LaTeX left in the prose: {text[max(0, m.start() - 40):m.end() + 20]!r}"
           for m in RAW_TEX.finditer(text)]
    wide = [f"wider than the column at 1280 px: {w}" for w in tab.evaluate(OVERFLOW_JS)]
    assert raw + wide == [], "\n".join(raw + wide)
    broken = tab.evaluate(
        "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    assert broken == [], f"images that did not load: {broken}"
    src = _source_of(page)
    if src is not None:
        source = src.read_text(encoding="utf-8")
        if "{prf:theorem}" in source:
            assert tab.locator("div.theorem").count() >= source.count("{prf:theorem}")
        if "{exercise}" in source:
            assert tab.locator("div.exercise").count() >= source.count("{exercise}")
        if "{solution-start}" in source:
            assert tab.locator("div.solution").count() >= source.count("{solution-start}")
        figures = source.count("name: fig-")
        assert tab.locator("figure").count() + tab.locator("div.figure").count() >= figures
    ctx.close()


CLICKED_CHAPTER = "book/01_topic_models.html"


def test_header_launch_buttons_open_notebooks(browser) -> None:
    """Click the header's Colab and Binder buttons of one chapter; each opens the .ipynb."""
    b, base = browser
    page = HTML / CLICKED_CHAPTER
    assert page.exists(), f"{CLICKED_CHAPTER} is not in the built book"
    # One fresh context per launcher: a request left over from the previous click (a
    # retried, aborted load of Colab, say) cannot then be mistaken for the next one.
    for name in LAUNCHERS.values():
        ctx = b.new_context()
        # Nothing may leave the machine: the launcher's address is recorded, then aborted.
        ctx.route(re.compile(r"^(?!http://127\.0\.0\.1).*"), lambda route: route.abort())
        tab = ctx.new_page()
        tab.goto(f"{base}/{CLICKED_CHAPTER}", wait_until="load")
        menu = tab.locator("button[aria-label='Launch interactive content']")
        assert menu.count() == 1, "no launch-buttons menu in the page header"
        menu.click()
        button = tab.locator(".dropdown-menu a.dropdown-item", has_text=name)
        assert button.count() == 1, f"no {name} launch button in the header"
        with ctx.expect_event("request", predicate=lambda r: launch_target(r.url) is not None,
                              timeout=10000) as request:
            button.click()
        opened = request.value.url
        assert LAUNCHERS[urlparse(opened).netloc] == name, f"{name} opened {opened}"
        assert launch_target(opened) == "notebooks/01_topic_models.ipynb", opened
        ctx.close()
