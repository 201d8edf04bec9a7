"""Screenshot app pages in headless Chromium: python scripts/shoot.py URL OUT.png [wait_s] [width]."""
import sys

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


def shoot(url: str, out: str, wait_s: float = 6, width: int = 1400, height: int = 2200) -> None:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": width, "height": height})
        page.goto(url)
        page.wait_for_selector("[data-testid=stApp]", timeout=30000)
        page.wait_for_timeout(wait_s * 1000)
        page.screenshot(path=out, full_page=True)
        b.close()


if __name__ == "__main__":
    shoot(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 6,
          int(sys.argv[4]) if len(sys.argv) > 4 else 1400)
