"""Korean a Korean engineer would write, on every page, and the projector's first screen
(item 4), in the real app in headless Chromium against the session's real vLLM server.

One walk opens every page in Korean through the address (?lang=ko, as a reload or a shared link would) at
1920×1080, with realistic content: the shipped example runs (examples/) imported into this module's history,
so History, Load test, Naive vs vLLM and Tuning draw their charts, the session's server adopted for the
Server, Monitor and Chat pages, and one chat answer. Of each page it collects the text a viewer can see (the
DOM's visible text nodes, without code blocks) and the charts' text (titles, axes, annotations, legends,
hover templates, bar labels, read from the plotly figures) and asserts that no English word is left
outside the names a Korean engineer keeps in English (ALLOWED: vLLM, TTFT, flags, units, ...). Data is not
UI: the lab's prompts and the model's answers are English wherever they are quoted, so their words are
allowed in tick labels and hover texts, the places that quote them.

The same walk checks the first screen: each page's first chart (on a page without one, its first headline
metric) starts above the fold."""
from __future__ import annotations

import time

import pytest

from engine.messages import catalog
from engine.results.store import RunStore

from .browser import adopting_app, settle
from .korean import WORD, data_words, english_in, unquoted

pytestmark = [pytest.mark.e2e, pytest.mark.server]

SCREEN = {"width": 1920, "height": 1080}
# The app's pages by url path (app.py's st.navigation), with their English titles.
PAGES = {"": "Guided lab", "server": "vLLM server", "monitor": "Monitor", "naive_vs_vllm": "Naive vs vLLM",
         "load_test": "Load test", "tuning": "Tuning", "chat": "Chat", "history": "History", "room": "The room"}
KO = catalog("ko")  # the app's own: its .po compiled where the .mo is missing or older

# What a viewer sees: text nodes that are rendered, outside code, charts and what is marked translate=no
# (material icons, written as ligatures: "visibility");
# a chat message's own text is data. And of each plotly figure, its own text.
COLLECT = """() => {
  const visible = el => el && el.checkVisibility({visibilityProperty: true, opacityProperty: true});
  document.querySelectorAll('[data-testid=stChatMessage]').forEach(m => {
    const body = m.querySelector('[data-testid=stMarkdownContainer]'); if (body) body.dataset.labData = '1'; });
  const ui = [], data = [];
  for (const root of document.querySelectorAll('[data-testid=stMainBlockContainer], [data-testid=stSidebar]')) {
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walk.nextNode()) {
      const el = walk.currentNode.parentElement, t = walk.currentNode.textContent.trim();
      if (!t || !visible(el)) continue;
      if (el.closest('pre, code, [data-testid=stCode], .js-plotly-plot, [translate=no]')) continue;
      (el.closest('[data-lab-data]') ? data : ui).push(t);
    }
  }
  const chart = [], quoted = [];
  const add = (to, v) => {
    if (v == null) return;
    if (Array.isArray(v)) v.forEach(x => add(to, x));
    else if (typeof v === 'object') add(to, v.text);
    else if (typeof v === 'string') to.push(v);
  };
  for (const gd of document.querySelectorAll('[data-testid=stMainBlockContainer] .js-plotly-plot')) {
    const L = gd.layout || {};
    add(chart, L.title);
    for (const k of Object.keys(L)) if (/^[xy]axis\\d*$/.test(k)) add(chart, L[k].title);
    (L.annotations || []).forEach(a => add(chart, a.text));
    (gd.data || []).forEach(t => { add(chart, t.name); add(chart, t.hovertemplate); add(chart, t.texttemplate);
                                   add(quoted, t.hovertext); add(quoted, t.text); });
    gd.querySelectorAll('.xtick text, .ytick text').forEach(t => quoted.push(t.textContent));
  }
  return {ui, data, chart, quoted};
}"""

# Where the first chart and the first headline metric start, relative to the top of the screen.
FOLD = """() => {
  const top = sel => { const el = document.querySelector('[data-testid=stMainBlockContainer] ' + sel);
                       return el ? el.getBoundingClientRect().top : null; };
  return {chart: top('.js-plotly-plot'), metric: top('[data-testid=stMetric]'),
          action: top('[data-testid=stBaseButton-primary], [data-testid=stBaseButton-primaryFormSubmit]')};
}"""


@pytest.fixture(scope="module")
def app(vllm_server, tmp_path_factory):
    """The app adopting the session's server (as test_e2e_browser's), its history holding the example runs."""
    from engine.results.store import RunStore

    d = tmp_path_factory.mktemp("e2e-korean")
    assert RunStore(d / "history.sqlite").import_examples(), "the shipped example runs did not import"
    with adopting_app(vllm_server, d, SERVING_LAB_LANG="") as a:  # English unless the address asks
        yield a


@pytest.fixture(scope="module")
def walk(browser, app):
    """Each page once, in Korean, at the projector's size: what it showed (visited lazily, kept per path)."""
    ctx = browser.new_context(viewport=SCREEN, locale="en-US")  # English browser: only ?lang=ko makes it Korean
    page = ctx.new_page()
    seen: dict[str, dict] = {}

    def visit(path: str) -> dict:
        if path not in seen:
            page.goto(f"{app.url}/{path}?lang=ko")
            page.get_by_role("heading", name=KO.gettext(PAGES[path])).first.wait_for(timeout=60000)
            if path == "chat":  # one answer, so the page shows its stats line and token chart
                box = page.get_by_test_id("stChatInputTextArea")
                box.fill("한국의 수도는 어디인가요? 한 문장으로 답하세요.")
                box.press("Enter")
                page.locator(".js-plotly-plot").first.wait_for(timeout=120000)
            if path == "load_test":  # the page shows only the runs it made: one, so it has its picture
                before = len(RunStore(app.env["SERVING_LAB_DB"]))
                page.get_by_role("button", name=KO.gettext("Run load test")).click()
                page.locator(".js-plotly-plot").first.wait_for(timeout=180000)
                # its run saved: done drawing live
                wait_for(lambda: len(RunStore(app.env["SERVING_LAB_DB"])) > before, 180)
            settle(page)
            exc = page.get_by_test_id("stException")
            assert not exc.count(), f"/{path} shows an exception: {exc.first.inner_text()[:500]}"
            seen[path] = page.evaluate(COLLECT) | {"fold": page.evaluate(FOLD), "url": page.url,
                                                   "nav": page.evaluate(NAV)}
            seen[path]["data"] += answers(app.env["SERVING_LAB_DB"])  # the walk's own runs quote the model
            page.screenshot(path=str(app.log_path.parent / f"ko-{path or 'guide'}.png"))
        return seen[path]

    yield visit
    ctx.close()


def wait_for(ready, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < end, f"not ready after {seconds} s"
        time.sleep(0.5)


def answers(db: str) -> list[str]:
    """The model's answers in the app's history, the live runs the walk made included: data where a page
    quotes them (a load test's hover names each request's answer)."""
    store = RunStore(db)
    return [r.output_text for row in store.list() for r in store.load(row.id).records if r.output_text]


NAV = """() => [...document.querySelectorAll('[data-testid=stSidebarNav] a')].map(a => new URL(a.href).pathname)"""


def test_the_walk_covers_every_page(walk):
    """A page added to the navigation is walked too: add it to PAGES."""
    nav = {p.strip("/") for p in walk("")["nav"]}
    assert nav == set(PAGES), f"pages in the navigation but not walked, or walked but gone: {sorted(nav ^ set(PAGES))}"


@pytest.mark.parametrize("path", list(PAGES))
def test_a_korean_page_shows_no_english_but_names(walk, path):
    seen = walk(path)
    assert "lang=ko" in seen["url"], f"/{path} lost ?lang=ko: {seen['url']}"
    data = data_words() | {w.lower() for t in seen["data"] for w in WORD.findall(t)}
    left = {"text": english_in([unquoted(t) for t in seen["ui"]]), "charts": english_in(seen["chart"]),
            "chart labels": english_in(seen["quoted"], data)}
    left = {where: words for where, words in left.items() if words}
    assert not left, f"English left on /{path} in Korean: {left}"


@pytest.mark.parametrize("path", list(PAGES))
def test_the_first_screen_shows_the_key_picture(walk, path):
    """At 1920×1080 the page's first chart (a page without charts: its first headline metric; a page with nothing
    measured yet, as the guided lab's first step: its first action) starts above the fold, without scrolling."""
    fold = walk(path)["fold"]
    what, top = next(((k, fold[k]) for k in ("chart", "metric", "action") if fold[k] is not None), ("", None))
    assert top is not None, f"/{path} shows neither a chart, a headline metric nor an action"
    assert top < SCREEN["height"], (f"/{path}: its first {what} starts {top:.0f} px down, below the fold at "
                                    f"{SCREEN['height']}")
