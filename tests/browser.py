"""Headless Chromium for the tests that open a page in a real browser (they skip without one)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ["CHROMIUM", "needs_browser", "dump_dom", "screenshot"]

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome", "chrome")) if p), None)

needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="no headless Chromium (apt-get install chromium) to open the page in"
)

_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--disable-extensions",
]


def _run(args: list[str], timeout: int = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )


def dump_dom(url: str, *, size: tuple[int, int] = (1200, 800)) -> str:
    """The page's DOM after its scripts ran, as Chromium serialises it."""
    proc = _run([f"--window-size={size[0]},{size[1]}", "--dump-dom", url])
    assert proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def screenshot(url: str, out: Path, *, size: tuple[int, int] = (1200, 800)) -> Path:
    """A PNG of the page at ``url`` (window ``size``), written to ``out``."""
    _run([f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url])
    assert out.is_file() and out.stat().st_size > 0, f"Chromium wrote no screenshot of {url}"
    return out
