"""The guided lab on a projector, in a real Chromium at 1920×1080: the agenda's tabs move the
page (the presenter's and a browsing viewer's), and on every step, in English and Korean, what the step found
and "Next step" are on the first screen, with the chart whole; the summary opens at its title. Korean breaks
lines between words. The runs are saved ones (one per step, as the steps make them), so no server is needed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from engine import guide as g
from engine.guide.findings import FINDING_OF
from engine.messages import catalog

from .browser import ROOT, StreamlitApp, free_port, press_until, settle
from .guide_runs import seed

pytestmark = [pytest.mark.e2e]

TOKEN = "screen-presenter"
SCREEN = {"width": 1920, "height": 1080}
KO = catalog("ko")  # the app's own: compiled from the .po where no .mo is
SHOTS = ROOT / "artifacts" / "screenshots"


@pytest.fixture(scope="module")
def app(tmp_path_factory, lab_settings):
    d = tmp_path_factory.mktemp("e2e-guide-screen")
    seed(d, lab_settings)
    env = {"SERVING_LAB_VLLM_PORT": str(free_port()), "SERVING_LAB_RUNTIME": str(d / "runtime"),
           "SERVING_LAB_DB": str(d / "history.sqlite"), "SERVING_LAB_PRESENTER_TOKEN": TOKEN}
    with StreamlitApp(env, d / "streamlit.log") as a:
        yield a
        print(f"--- streamlit log ---\n{a.log_tail()}")


def _saved(app) -> str:
    return json.loads(g.guide_path(Path(app.env["SERVING_LAB_DB"])).read_text())["current"]


def _open(browser, app, lang: str, presenter: bool):
    ctx = browser.new_context(viewport=SCREEN, locale="ko-KR" if lang == "ko" else "en-US")
    page = ctx.new_page()
    page.goto(app.url)
    expect(page.get_by_role("heading", name=_t(lang, "Guided lab"))).to_be_visible(timeout=60000)
    if presenter:
        page.locator("[data-testid=stSidebar] input[type=password]").fill(TOKEN)
        page.keyboard.press("Enter")
        expect(page.get_by_role("button", name=_t(lang, "Start over"))).to_have_count(0)  # folded: not a button yet
        expect(page.get_by_text(_t(lang, "Start the guided lab over"))).to_be_visible(timeout=30000)
    return ctx, page


def _t(lang: str, text: str) -> str:
    return KO.gettext(text) if lang == "ko" else text


def _heading(page, lang: str, s: g.Step):
    if s.id == "summary":
        return page.get_by_role("heading", name=_t(lang, "What this lab found"))
    return page.get_by_role("heading", name=f"{s.number}. {_t(lang, str(s.title))}")


def _tab(page, lang: str, s: g.Step):
    """The agenda's tab of step `s` (its label may start with a tick)."""
    return page.locator("[data-testid=stButtonGroup] button").filter(
        has_text=f"{s.number} · {_t(lang, str(s.title))}")


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_the_agenda_moves_the_presenter_and_a_viewer_who_browses(browser, app, lang):
    presenter_ctx, presenter = _open(browser, app, lang, presenter=True)
    viewer_ctx, viewer = _open(browser, app, lang, presenter=False)
    try:
        for sid in ("start", "tuning", "naive"):
            s = g.step(sid)
            press_until(presenter, _tab(presenter, lang, s), lambda: _saved(app) == sid)
            expect(_heading(presenter, lang, s)).to_be_visible(timeout=30000)
        # a viewer who does not follow browses on their own: the room stays where the presenter put it
        s = g.step("streaming")
        press_until(viewer, _tab(viewer, lang, s), _heading(viewer, lang, s).is_visible)
        assert _saved(app) == "naive"
    finally:
        presenter_ctx.close()
        viewer_ctx.close()


# Where each part of the step is, relative to the screen: the finding (its box in whichever colour its verdict
# gives it: the one alert with the insights icon), the chart, Next step.
PLACES = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const place = el => { if (!el) return null; const r = el.getBoundingClientRect(); return [r.top, r.bottom]; };
  const box = sel => place(document.querySelector('[data-testid=stMainBlockContainer] ' + sel));
  const finding = [...document.querySelectorAll('[data-testid=stMainBlockContainer] [data-testid=stAlert]')]
      .find(a => [...a.querySelectorAll('[data-testid=stAlertDynamicIcon]')]
                 .some(i => i.textContent.trim() === 'insights'));
  const next = [...document.querySelectorAll('[data-testid=stMainBlockContainer] button')]
      .find(b => /Next step|다음 단계/.test(b.innerText));
  const r = next ? next.getBoundingClientRect() : null;
  return {finding: place(finding), chart: box('.js-plotly-plot'),
          next: r ? [r.top, r.bottom] : null, title: box('h3'), scrolled: main ? main.scrollTop : 0};
}"""


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_every_step_fits_the_first_screen(browser, app, lang):
    """Each step's finding (whatever its verdict's colour), its chart (whole: its x-axis too) and "Next step" within
    1080 px, as a projector shows it; the summary opens at its title, also when Next was pressed at the bottom of
    step 8."""
    ctx, page = _open(browser, app, lang, presenter=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    late = {}
    try:
        for s in g.STEPS:
            if s.id == "summary":  # as the presenter reaches it: Next step, pressed where it is
                press_until(page, page.get_by_role("button", name=_t(lang, "Next step")), lambda: _saved(app) == s.id)
            else:
                press_until(page, _tab(page, lang, s), lambda: _saved(app) == s.id)
            expect(_heading(page, lang, s)).to_be_visible(timeout=30000)
            settle(page)
            at = page.evaluate(PLACES)
            page.screenshot(path=str(SHOTS / f"guide-screen-{s.number:02d}-{s.id}-{lang}.png"))
            if s.id == "summary":
                if at["scrolled"] > 0 or at["title"] is None or at["title"][0] < 0:
                    late[s.id] = f"opens scrolled by {at['scrolled']} px, its title at {at['title']}"
                continue
            for part in ("finding", "chart", "next"):
                if at[part] is not None and at[part][1] > SCREEN["height"]:
                    late.setdefault(s.id, []).append(f"{part} ends at {at[part][1]:.0f} px")
            if at["next"] is None:
                late.setdefault(s.id, []).append("no Next step")
            if s.id in FINDING_OF and at["finding"] is None:  # every step's run here is saved: its finding is due
                late.setdefault(s.id, []).append("no finding")
        assert not late, f"below the first screen at 1920x1080 in {lang}: {late}"
    finally:
        ctx.close()


def test_korean_breaks_lines_between_words(browser, app):
    ctx, page = _open(browser, app, "ko", presenter=False)
    try:
        settle(page)  # the rule is drawn in the sidebar's last element: read the page once its run has ended
        rule = page.evaluate("() => getComputedStyle(document.querySelector("
                             "'[data-testid=stMainBlockContainer] [data-testid=stMarkdownContainer] p')).wordBreak")
        assert rule == "keep-all", rule
    finally:
        ctx.close()
