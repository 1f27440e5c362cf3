"""What an HTML report carries and what headless Chromium lays out of it, for the
tests that read a report page as its reader does."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest


def run_details(page: str) -> list[dict[str, Any]]:
    """What an HTML report's run table carries per run (its result, evidence and note),
    inflated, in the table's order."""
    runs = re.findall(r'<script type="application/x-evalfleet-run" id="run-(\d+)">([^<]*)<', page)
    kept = dict(
        re.findall(
            r'<script type="application/x-evalfleet-evidence" id="evidence-(\d+)">([^<]*)<', page
        )
    )

    def inflate(blob: str) -> Any:
        return json.loads(zlib.decompress(base64.b64decode(blob)))

    return [
        {**inflate(blob), "evidence": inflate(kept[i]) if i in kept else None} for i, blob in runs
    ]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    return None


def rendered_json(page: str, script: str, pre_id: str, tmp_path: Path) -> Any:
    """What `script` (appended to the page; it writes JSON into <pre id=PRE_ID>) read
    of the page as headless Chromium laid it out. Skips without Chromium."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium binary (chromium, chromium-browser, google-chrome) on PATH")
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", script + "</body>"), encoding="utf-8")
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            # A laptop's window; the page's own script may wait (an opened run decompresses).
            "--window-size=1280,1000",
            # Virtual time: it runs ahead while the page idles, so a generous budget costs
            # nothing where the page is quick, and spares a loaded machine (10 s once
            # ran out before a thousand runs were drawn, with 6 tests beside it).
            "--virtual-time-budget=30000",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    found = re.search(f'<pre id="{pre_id}">(.*?)</pre>', dom, re.DOTALL)
    assert found, f"Chromium did not render the page: {dom[:500]}"
    return json.loads(html.unescape(found.group(1)))
