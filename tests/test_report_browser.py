"""The HTML run report in a real browser: Debian's headless Chromium driven by Playwright.

``metainfer report`` (a subprocess) writes the report of the committed H200 run record (a copy in
tmp); Chromium opens the run page and every iteration page, and the test checks the tables and
images are there and load, every relative link points at a file, and the console stayed clean.
Screenshots go to the test's tmp folder (their paths are printed). Outside CI the test skips when
Chromium or Playwright is absent; in CI (``METAINFER_CI=1``, set by ``.ci/run``) it fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from metainfer.build.report_html import RENDER_DIFF_CHARS

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "runs" / "20261130-165218-qwen3.6-35b-a3b-nvfp4-h200"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def _need_browser():
    missing = []
    if not Path(CHROMIUM).is_file():
        missing.append("chromium (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[dev]')")
    if missing:
        msg = "the report's browser test needs " + " and ".join(missing)
        if os.environ.get("METAINFER_CI"):
            pytest.fail(msg + " (.ci/run installs both)")
        pytest.skip(msg)


def _check_page(page, url: str, errors: list[str], *, images_expected: bool = True) -> dict:
    """Open ``url``; assert its images (when expected) loaded and its relative links exist; return counts."""
    page.goto(url)
    page.wait_for_load_state("load")
    images = page.eval_on_selector_all("img", "els => els.map(e => [e.getAttribute('src'), e.complete && e.naturalWidth])")
    assert images or not images_expected, f"{url}: no images"
    broken = [src for src, w in images if not w]
    assert not broken, f"{url}: images that did not load: {broken}"
    base = Path(unquote(urlparse(url).path)).parent
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    for h in hrefs:
        assert "://" not in h and not h.startswith("/"), f"{url}: non-relative link {h}"
        assert (base / h.split("#")[0]).is_file(), f"{url}: broken link {h}"
    assert not errors, f"console errors on {url}: {errors}"
    return {"images": len(images), "links": len(hrefs)}


def test_report_opens_in_chromium(tmp_path):
    _need_browser()
    from playwright.sync_api import sync_playwright

    run = tmp_path / RUN.name
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("*.html", "*.png", "branch.bundle"))
    proc = subprocess.run([sys.executable, "-m", "metainfer.cli", "report", str(run)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = run / "summary.html"
    assert f"html: {summary}" in proc.stdout
    n_iter = len([d for d in run.glob("iter-*") if (d / "report.json").is_file()])
    assert n_iter >= 2

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))

        counts = _check_page(page, summary.as_uri(), errors)
        assert counts["images"] >= 2  # objective and workloads
        rows = page.locator("table#iterations tbody tr")
        assert rows.count() == n_iter
        assert "baseline" in rows.nth(0).inner_text() and "rejected" in rows.nth(1).inner_text()
        header = page.locator("table#iterations thead").inner_text()
        assert "candidate vs best" in header and "decode-bs1" in header
        state = json.loads((run / "run.json").read_text())
        assert state["status"] in page.locator("table#facts").inner_text()
        shot = tmp_path / "report-run.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000

        for i in range(n_iter):
            errors.clear()
            _check_page(page, (run / f"iter-{i:03d}" / "report.html").as_uri(), errors, images_expected=False)
            assert page.locator("table#stages tbody tr").count() >= 3
            assert page.locator("table#workloads tbody tr").count() == 3
            diff = (run / f"iter-{i:03d}" / "candidate.diff").read_text()
            if i == 0 and len(diff) > RENDER_DIFF_CHARS:  # the render: its files as a table, not the whole engine inline
                assert page.locator("#diff").count() == 0
                assert page.locator("table#render-files tr").count() == 1 + diff.count("diff --git ")
                continue
            assert page.locator("#diff .diff").count() == 1  # pygments-highlighted diff
            assert page.locator("#diff span.gd, #diff span.gi").count() >= 1  # deleted / inserted lines styled
        page.screenshot(path=str(tmp_path / "report-iteration.png"), full_page=True)
        browser.close()
    print(f"screenshots: {shot} {tmp_path / 'report-iteration.png'}")
