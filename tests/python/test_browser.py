# SPDX-License-Identifier: MIT
"""tw-report --html and --flamegraph in a real browser: headless Chromium (Debian's chromium
package) driven by Playwright, with the network off. `make check-browser` installs both and runs
these; elsewhere they are skipped when either is missing (TW_BROWSER_TESTS=required makes that a
failure). Screenshots are saved in each test's tmp dir, and in $TW_SCREENSHOT_DIR when it is set."""
import os
import shutil
import subprocess

import pytest

import torchwrapper as tw

from models import train

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
CHROMIUM = os.environ.get("TW_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FULL_WIDTH = 1180.0  # the flame graph's width less its padding, in its own units

try:
    from playwright.sync_api import sync_playwright
except ImportError:
    sync_playwright = None


@pytest.fixture(scope="module")
def browser():
    missing = ("playwright is not installed (pip install playwright)" if sync_playwright is None
               else None if os.access(CHROMIUM, os.X_OK) else f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    if missing:
        if os.environ.get("TW_BROWSER_TESTS") == "required":
            pytest.fail(missing)
        pytest.skip(missing)
    with sync_playwright() as p:
        # --no-sandbox: Chromium's sandbox refuses to start as root (CI containers).
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The HTML report and the SVG flame graph of a real training loop (AlexNet's shape, SGD)."""
    out = tmp_path_factory.mktemp("browser-run")
    tw.TorchWrapper({"out_dir": str(out / "run"), "format": "csv"}).start(lambda: train("alexnet_sgd", 4))
    html, svg = out / "report.html", out / "flame.svg"
    done = subprocess.run([TW_REPORT, "--html", str(html), "--flamegraph", str(svg), str(out / "run")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return html, svg


@pytest.fixture
def page(browser):
    """A page with the network off: any request but file:// is refused and noted, as are console
    errors and uncaught exceptions."""
    context = browser.new_context(offline=True, viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.problems = []
    page.on("console", lambda m: m.type == "error" and page.problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: page.problems.append(f"uncaught: {e}"))

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            page.problems.append(f"network: {r.request.url}")
            r.abort()

    page.route("**/*", route)
    yield page
    context.close()


def screenshot(page, tmp_path, name, full_page=True):
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=full_page)
    if os.environ.get("TW_SCREENSHOT_DIR"):
        os.makedirs(os.environ["TW_SCREENSHOT_DIR"], exist_ok=True)
        shutil.copy(path, os.path.join(os.environ["TW_SCREENSHOT_DIR"], name))
    assert path.stat().st_size > 10000  # an image of a page, not of nothing
    return path


def frames(page):
    """The flame graph's frames as the browser has them now."""
    return page.evaluate("""() => [...document.querySelectorAll('#tw-flame g.twf-f')].map((g, i) => ({
        i, name: g.twFrame.name, y: +g.querySelector('rect').getAttribute('y'),
        x: +g.querySelector('rect').getAttribute('x'), width: +g.querySelector('rect').getAttribute('width'),
        fill: g.querySelector('rect').getAttribute('fill'), shown: getComputedStyle(g).display !== 'none'}))""")


def test_the_report_renders_offline_without_errors(page, pages, tmp_path):
    html, _ = pages
    page.goto(html.as_uri())
    page.wait_for_load_state("load")
    assert page.problems == []
    for section in ("summary", "steps", "flame", "apis", "modules"):
        assert page.locator(f"#{section}").is_visible()
    assert page.locator("#api-table tbody tr").count() > 10
    steps = tw.load(str(html.parent / "run"))["step"].max() + 1
    assert page.locator("#step-chart rect").count() == steps  # a bar a step
    box = page.locator("#tw-flame").bounding_box()
    assert box["width"] > 1000 and box["height"] > 100
    assert len(frames(page)) > 10
    screenshot(page, tmp_path, "report.png")


def test_clicking_a_frame_zooms_it_to_the_full_width(page, pages, tmp_path):
    html, _ = pages
    page.goto(html.as_uri())
    before = frames(page)
    bottom = max(f["y"] for f in before)
    # A frame two levels up that shares its level with others: zoomed, it alone fills the width.
    level = [f for f in before if f["y"] == bottom - 32]
    target = max((f for f in level if f["width"] < FULL_WIDTH / 2), key=lambda f: f["width"])
    frame = page.locator("#tw-flame g.twf-f").nth(target["i"])
    frame.hover()
    assert page.locator("#tw-flame .twf-details").text_content().startswith(f"{target['name']}: ")
    frame.click()
    after = {f["i"]: f for f in frames(page)}
    assert after[target["i"]]["width"] == pytest.approx(FULL_WIDTH, abs=0.01)
    assert after[target["i"]]["x"] == pytest.approx(10, abs=0.01)
    others = [f for f in level if f["i"] != target["i"]]
    assert others and not any(after[f["i"]]["shown"] for f in others)
    assert after[0]["shown"] and after[0]["width"] == pytest.approx(FULL_WIDTH)  # "all", below it
    assert page.locator("#tw-flame .twf-reset").is_visible()
    screenshot(page, tmp_path, "report-zoomed.png")
    page.locator("#tw-flame .twf-reset").click()
    assert [(f["x"], f["width"], f["shown"]) for f in frames(page)] == \
           [(f["x"], f["width"], True) for f in before]
    assert page.problems == []


def test_search_highlights_the_matching_frames(page, pages, tmp_path):
    html, _ = pages
    page.goto(html.as_uri())
    page.locator("#tw-flame-search").fill("conv")
    now = frames(page)
    hits = [f for f in now if "conv" in f["name"].lower()]
    assert hits and all(f["fill"] == "#e600e6" for f in hits)
    assert not any(f["fill"] == "#e600e6" for f in now if f not in hits)
    assert page.locator("#tw-flame .twf-matched").text_content().startswith(f"Matched: {len(hits)} frames, ")
    screenshot(page, tmp_path, "report-search.png")
    page.locator("#tw-flame-search").fill("")
    assert not any(f["fill"] == "#e600e6" for f in frames(page))


def test_clicking_a_column_name_sorts_the_api_table(page, pages):
    html, _ = pages
    page.goto(html.as_uri())

    def calls():
        return [int(c) for c in page.locator("#api-table tbody tr td:nth-child(2)").all_text_contents()]

    page.locator("#api-table th", has_text="calls").click()
    assert calls() == sorted(calls(), reverse=True)
    page.locator("#api-table th", has_text="calls").click()
    assert calls() == sorted(calls())
    assert page.problems == []


def test_a_long_api_name_wraps_between_its_parts_and_reads_whole(page, pages):
    """A name too long for its column breaks after a dot (torch.nn.functional.<br>linear), never
    inside a part ("forwar" / "d"); its text, for sorting and copying, is the name unbroken."""
    html, _ = pages
    page.goto(html.as_uri())
    page.set_viewport_size({"width": 900, "height": 900})   # narrow: the long names must wrap
    cells = page.locator("#api-table tbody tr td:nth-child(1)")
    names = cells.all_text_contents()
    assert all(" " not in n and "\n" not in n for n in names)
    wrapped = 0
    for i, name in enumerate(names):
        lines = cells.nth(i).evaluate(
            """td => { const r = document.createRange(); r.selectNodeContents(td);
                       const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
                       return tops.size; }""")
        if lines > 1 and "." in name:   # (a name of one part, an autograd node's, breaks where it must)
            wrapped += 1
            # each part (a text node between <wbr>s) stays on one line: the browser broke the name
            # only where a <wbr> allowed it
            spans = cells.nth(i).evaluate(
                """td => [...td.childNodes].filter(n => n.nodeType === 3).map(n => {
                       const r = document.createRange(); r.selectNodeContents(n);
                       return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; })""")
            assert spans and max(spans) == 1, (name, spans)
    assert wrapped > 0, names
    assert page.problems == []


def test_the_standalone_svg_zooms_and_searches(page, pages, tmp_path):
    _, svg = pages
    page.goto(svg.as_uri())
    assert page.problems == []
    before = frames(page)
    target = max((f for f in before if f["y"] < before[0]["y"] and f["width"] < FULL_WIDTH / 2),
                 key=lambda f: f["width"])
    page.locator("#tw-flame g.twf-f").nth(target["i"]).click()
    assert frames(page)[target["i"]]["width"] == pytest.approx(FULL_WIDTH, abs=0.01)
    page.locator("#tw-flame g.twf-f").first.click()  # the bottom frame, "all", zooms out
    assert [f["width"] for f in frames(page)] == [f["width"] for f in before]
    page.once("dialog", lambda d: d.accept("relu"))
    page.locator("#tw-flame .twf-search").click()
    shown = [f for f in frames(page) if f["shown"]]
    assert any("relu" in f["name"] for f in shown)
    assert all((f["fill"] == "#e600e6") == ("relu" in f["name"].lower()) for f in shown)
    screenshot(page, tmp_path, "flame.png", full_page=False)  # an SVG document has no page to scroll
    assert page.problems == []


def test_the_diff_page_renders_offline_and_sorts(page, tmp_path):
    """--html with --diff: two runs of a real training loop compared on one page."""
    for name in ("base", "new"):
        tw.TorchWrapper({"out_dir": str(tmp_path / name), "format": "csv"}).start(lambda: train("alexnet_sgd", 6))
    html = tmp_path / "diff.html"
    done = subprocess.run([TW_REPORT, "--diff", str(tmp_path / "base"), str(tmp_path / "new"), "--html", str(html)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page.goto(html.as_uri())
    page.wait_for_load_state("load")
    assert page.problems == []
    assert page.locator("#runs").is_visible() and page.locator("#diff").is_visible()
    rows = page.locator("#diff-table tbody tr")
    assert rows.count() > 10
    page.locator("#diff-table th", has_text="BASE self us/step").click()  # sorts, largest first
    values = [float(v) for v in page.eval_on_selector_all(
        "#diff-table tbody tr", "rows => rows.map(r => r.cells[4].textContent)") if v]
    assert values == sorted(values, reverse=True)
    screenshot(page, tmp_path, "diff.png")


def test_the_notebook_output_shows_the_report_in_its_frame(page, pages, tmp_path):
    """What %%torchwrapper (and a profile as a cell's value) puts under a notebook cell: the report
    page in a sandboxed frame, its scripts running, nothing fetched, no error."""
    from torchwrapper.integrations.jupyter import Report

    html, _ = pages
    output = Report(str(html.parent / "run"))._repr_html_()
    notebook = tmp_path / "notebook-output.html"
    notebook.write_text(f"<!doctype html><html><body><div class='output'>{output}</div></body></html>")
    page.goto(notebook.as_uri())
    page.wait_for_load_state("load")
    report = page.frame_locator("iframe")
    report.locator("#api-table").wait_for()
    assert report.locator("#api-table tbody tr").count() > 10
    assert report.locator("#tw-flame g.twf-f").count() > 10
    report.locator("#api-table th").first.click()   # the page's own script runs in the frame: it sorts
    assert page.problems == []
    screenshot(page, tmp_path, "notebook-output.png", full_page=False)


def test_the_page_opens_with_the_findings_at_the_programs_lines(page, tmp_path):
    import torch

    def mistaken():
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
    with tw.profile(out_dir=str(tmp_path / "run")):
        mistaken()
    html = tmp_path / "report.html"
    done = subprocess.run([TW_REPORT, "--html", str(html), str(tmp_path / "run")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page.goto(html.as_uri())
    page.wait_for_load_state("load")
    assert page.problems == []
    findings = page.locator("#findings")
    assert findings.is_visible()
    assert findings.bounding_box()["y"] < page.locator("#summary").bounding_box()["y"]   # first on the page
    fills = page.locator("#findings .finding", has_text="zero_grad_fills")
    assert fills.count() == 1 and fills.first.get_attribute("class") in ("finding medium", "finding high")
    assert "test_browser.py:" in fills.first.inner_text() and "torchwrapper/" not in findings.inner_text()
    screenshot(page, tmp_path, "findings.png", full_page=False)
