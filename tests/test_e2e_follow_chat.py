"""A follower who was chatting when the presenter moved: once the answer has streamed, it is
taken to the presenter's step, as a follower on any other page is. Real Chromium, the session's real vLLM server."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from engine import guide as g

from .browser import adopting_app, press_until

pytestmark = [pytest.mark.server, pytest.mark.e2e]

TOKEN = "follow-chat-presenter"
SCREEN = {"width": 1920, "height": 1080}
FOLLOW_MS = 60000  # a liveness bound: the follower's tick is every 1.5 s; a busy 2-core machine redraws slower
STREAM_MS = 600000  # a whole answer on two shared CPU cores


@pytest.fixture
def app(vllm_server, tmp_path):
    with adopting_app(vllm_server, tmp_path, SERVING_LAB_PRESENTER_TOKEN=TOKEN, SERVING_LAB_LANG="en") as a:
        yield a


def _saved(app) -> str | None:
    path = g.guide_path(Path(app.env["SERVING_LAB_DB"]))
    return json.loads(path.read_text())["current"] if path.exists() else None  # saved on the first move


def test_a_follower_who_was_chatting_returns_to_the_presenters_step(browser, app):
    presenter_ctx, follower_ctx = (browser.new_context(viewport=SCREEN) for _ in range(2))
    presenter, follower = presenter_ctx.new_page(), follower_ctx.new_page()
    try:
        for page in (presenter, follower):
            page.goto(app.url)
            expect(page.get_by_role("heading", name="Guided lab")).to_be_visible(timeout=60000)
        presenter.locator("[data-testid=stSidebar] input[type=password]").fill(TOKEN)
        presenter.keyboard.press("Enter")
        expect(presenter.get_by_role("button", name="Next step")).to_be_enabled(timeout=30000)
        switch = follower.locator("[data-testid=stSidebar]").get_by_role("switch", name="Follow the presenter")
        press_until(follower, follower.locator("[data-testid=stSidebar]").get_by_text("Follow the presenter"),
                    switch.is_checked)
        nav = follower.locator("[data-testid=stSidebarNav]").get_by_text("Chat", exact=True)
        press_until(follower, nav, follower.get_by_role("heading", name="Chat", exact=True).is_visible)

        box = follower.get_by_test_id("stChatInputTextArea")
        box.fill("Write a long story about a lighthouse keeper, in many paragraphs.")
        box.press("Enter")
        stop = follower.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop")  # not the header's
        expect(stop).to_be_visible(timeout=STREAM_MS)  # streaming
        press_until(presenter, presenter.get_by_role("button", name="Next step"), lambda: _saved(app) == "free")
        streaming_when_moved = stop.is_visible()
        expect(stop).to_have_count(0, timeout=STREAM_MS)  # the answer ended
        expect(follower.get_by_role("heading", name="2. Free the memory")).to_be_visible(timeout=FOLLOW_MS)
        assert streaming_when_moved, "the answer ended before the presenter moved: nothing was tested"
    finally:
        presenter_ctx.close()
        follower_ctx.close()
