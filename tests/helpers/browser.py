"""Headless Chromium from the system's packages (``make install-chromium``), with the network off.

:func:`render` loads a page from disk and returns its DOM after scripts ran and every console message the page
produced (an uncaught error included); :func:`screenshot` writes a PNG of it. Both skip the calling test where no
Chromium is installed.
"""

import dataclasses
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
# Every request goes to a closed local port and every host name fails to resolve: nothing can load from elsewhere.
OFFLINE = ("--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND")
# Chromium logs a page's console messages (console.log/error, uncaught exceptions) as "...:CONSOLE:<line>] ...".
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\))?:\d*\] (.*)")
# An attribute that would make the browser fetch something from the network.
EXTERNAL = re.compile(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:|//)""", re.IGNORECASE)


@dataclasses.dataclass
class Rendered:
    dom: str
    console: list[str]


def require_chromium() -> str:
    if CHROMIUM is None:
        pytest.skip("no chromium binary (make install-chromium installs Debian's)")
    return CHROMIUM


def _run(page: pathlib.Path, *flags: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        return subprocess.run([require_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                               "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", *OFFLINE,
                               *flags, pathlib.Path(page).resolve().as_uri()],
                              capture_output=True, text=True, timeout=120, check=True)


def render(page: pathlib.Path) -> Rendered:
    """The page's DOM once loaded, and the console messages it logged."""
    done = _run(page, "--enable-logging=stderr", "--v=0", "--dump-dom")
    return Rendered(done.stdout, [m.group(1) for m in map(CONSOLE.search, done.stderr.splitlines()) if m])


def screenshot(page: pathlib.Path, png: pathlib.Path, width: int = 1200, height: int = 1600) -> pathlib.Path:
    """A PNG of the page's first ``height`` pixels at ``width``."""
    _run(page, "--hide-scrollbars", f"--window-size={width},{height}", f"--screenshot={pathlib.Path(png).resolve()}")
    return png


def external_urls(html: str) -> list[str]:
    """Attributes of ``html`` that point at the network (``src="https://..."``, ``href="//cdn..."``)."""
    return EXTERNAL.findall(html)


def data_values(html: str) -> dict[str, float | str]:
    """The page's checkable numbers: ``data-value`` name -> ``data-exact`` (a float where it parses)."""
    from html.parser import HTMLParser

    found = {}

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if "data-value" in attrs:
                exact = attrs.get("data-exact", "")
                try:
                    found[attrs["data-value"]] = float(exact)
                except ValueError:
                    found[attrs["data-value"]] = exact

    Parser().feed(html)
    return found
