"""How the browser tests (and the multi-host tests' pages) start Debian's Chromium."""

import shutil

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

CHROMIUM_LAUNCH = {
    "executable_path": CHROMIUM,
    "headless": True,
    "args": [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        # A wheel notch scrolls at once, not over an animation that a loaded machine lets run
        # into the next measurement (the older-page test then measured a whole notch).
        "--disable-smooth-scrolling",
    ],
}
