"""`ert report` (and `ert-run --report`): the HTML pages, opened in a real headless Chromium from file:// with the
network blocked; checked for console errors, roof counts, hover text and one series per machine."""

from __future__ import annotations

import html

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO, run_cmd, stderr_lines
from ert.interop.ert_results import load_any_ceilings
from ert.consumers.cells import format_rate

pytestmark = pytest.mark.slow  # runs ert, and a browser

HANDWORKED = REPO / "tests" / "data" / "ceilings-handworked-cpu.json"
MAX_BARE_BYTES = 2 * 1024 * 1024  # the bound for a bare run's page


def _chromium() -> str | None:
    for name in (os.environ.get("ERT_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by playwright (never playwright's own browser download)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium; or set ERT_CHROMIUM)")
    with sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()


class Page:
    """One report opened from file:// offline; every console error and every non-file request is recorded."""

    def __init__(self, browser, path: Path):
        self.context = browser.new_context(offline=True, viewport={"width": 1200, "height": 900})
        self.requests: list[str] = []
        self.errors: list[str] = []

        def route(r):
            if not r.request.url.startswith("file:"):
                self.requests.append(r.request.url)
                return r.abort()
            return r.continue_()

        self.context.route("**/*", route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.goto(path.resolve().as_uri())

    def hover_text(self, locator) -> str:
        """Move the mouse onto ``locator`` (a point of its line where it takes the pointer); the tooltip's text,
        which names every element under the pointer (roofs that coincide are all named)."""
        locator.scroll_into_view_if_needed()
        x, y = locator.evaluate("""g => {
            const path = g.querySelector('path.hit');
            if (path) {
                const length = path.getTotalLength(), m = path.getScreenCTM();
                for (const f of [0.5, 0.3, 0.7, 0.15, 0.85, 0.05, 0.95, 0.4, 0.6]) {
                    const q = path.getPointAtLength(length * f);
                    const x = m.a * q.x + m.c * q.y + m.e, y = m.b * q.x + m.d * q.y + m.f;
                    if (document.elementsFromPoint(x, y).some(el => g.contains(el))) { return [x, y]; }
                }
            }
            const r = g.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        }""")
        self.page.mouse.move(x, y)
        tip = self.page.locator("#tip")
        tip.wait_for(state="visible", timeout=3000)
        return tip.inner_text()

    def close(self, screenshot: Path) -> None:
        self.page.screenshot(path=str(screenshot), full_page=True)
        self.context.close()
        assert self.errors == [], f"console errors: {self.errors}"
        assert self.requests == [], f"the page asked the network for: {self.requests}"


def _report(tmp_path: Path, name: str, *inputs) -> Path:
    out = tmp_path / name
    proc = run_cmd("ert", "report", *inputs, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return out


def _roof_count(doc: dict) -> int:
    return len(doc["ceilings"]["memory"]) + len(doc["ceilings"]["compute"])


def _ert_file(tmp_path: Path) -> Path:
    """A roofline.json in ERT's own layout, as `ert export --format ert` writes it from tests/data's hand-worked
    CPU ceilings (ERT's real files are a third party's, not shipped: this one is ours), read back through the
    same reader as ERT's."""
    out = tmp_path / "exported-roofline.json"
    proc = run_cmd("ert", "export", "--format", "ert", "-o", out, HANDWORKED)
    assert proc.returncode == 0, proc.stderr
    return out


def test_bare_run_report(browser, tiny_run, tmp_path):
    out = _report(tmp_path, "bare.html", tiny_run)
    assert out.stat().st_size < MAX_BARE_BYTES
    doc = load_any_ceilings(tiny_run / "ceilings.json")
    page = Page(browser, out)
    p = page.page
    # The roofline holds every roof of the file; the sweep every memory plateau and every compute peak.
    assert p.locator("figure[data-chart=roofline] g.roof").count() == _roof_count(doc)
    sweep_roofs = [e for e in doc["ceilings"]["memory"] if e.get("kind") is None] + doc["ceilings"]["compute"]
    assert p.locator("figure[data-chart=sweep] g.roof").count() == len(sweep_roofs)
    # Every measured point of raw.jsonl is drawn (one launch per point on the CPU backend).
    ids = {json.loads(line)["id"] for line in (tiny_run / "raw.jsonl").read_text().splitlines()
           if '"type":"point"' in line.replace(" ", "")}
    assert {p.locator("figure[data-chart=sweep] g.point").nth(i).get_attribute("data-id")
            for i in range(p.locator("figure[data-chart=sweep] g.point").count())} == ids
    # Hover: the first fp64 read+write level's roof says its value, working set, spread and evidence.
    l1 = next(e for e in doc["ceilings"]["memory"] if e["access"] == "rw" and e["precision"] == "fp64")
    roof = p.locator(f"figure[data-chart=roofline] g.roof[data-roof=memory][data-level={l1['level']}]"
                     "[data-access=rw][data-precision=fp64]")
    text = page.hover_text(roof)
    assert f"{format_rate(l1['gbytes_per_s'])} GB/s" in text
    assert "working set" in text and "spread" in text and l1["evidence"]["point_ids"][0] in text
    fma = max(doc["ceilings"]["compute"], key=lambda e: e["gflops_per_s"])
    text = page.hover_text(p.locator(f"figure[data-chart=roofline] g.roof[data-roof=compute]"
                                     f"[data-value='{fma['gflops_per_s']}']"))
    assert f"{format_rate(fma['gflops_per_s'])} GFLOP/s" in text and fma["evidence"]["point_id"] in text
    # A measured point (one no other point covers) says its id, rate and spread.
    p.locator("figure[data-chart=sweep]").first.scroll_into_view_if_needed()
    free = p.evaluate("""() => [...document.querySelectorAll('figure[data-chart=sweep] g.point')].filter(g => {
        const r = g.getBoundingClientRect(), hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
        return r.width > 0 && hit && g.contains(hit); }).map(g => g.getAttribute('data-id'))""")
    assert free
    # The tip under the pointer is the topmost element's: a point that a level's band or roof line crosses
    # at its centre shows that element's tip, so take the first free point whose own tip shows.
    for point_id in free[:10]:
        text = page.hover_text(p.locator(f"figure[data-chart=sweep] g.point[data-id='{point_id}']"))
        if text.startswith(point_id):
            break
    assert text.startswith(point_id) and "GB/s" in text and "spread" in text, (free[:10], text)
    # A legend button hides its series and shows it again.
    shown = p.locator("figure[data-chart=roofline] g.roof:visible").count()
    button = p.locator("figure[data-chart=roofline] button.tog[data-tag='mem-fp64-rw']")
    button.click()
    assert p.locator("figure[data-chart=roofline] g.roof:visible").count() == shown - sum(
        1 for e in doc["ceilings"]["memory"] if (e.get("precision"), e.get("access")) == ("fp64", "rw"))
    button.click()
    assert p.locator("figure[data-chart=roofline] g.roof:visible").count() == shown
    # The tables: ert show's numbers, every warning, and the full ert show text.
    body = p.locator("section.tables").inner_text()
    assert format_rate(l1["gbytes_per_s"]) in body
    assert p.locator("ul.warnings li").count() == len(doc.get("warnings", []))
    page.close(tmp_path / "bare.png")


def test_ert_roofline_report(browser, tmp_path):
    ert_json = _ert_file(tmp_path)
    out = _report(tmp_path, "ert.html", ert_json)
    doc = load_any_ceilings(ert_json)
    page = Page(browser, out)
    p = page.page
    assert p.locator("figure[data-chart=roofline] g.roof").count() == _roof_count(doc)
    assert p.locator("figure[data-chart=sweep]").count() == 0  # ERT keeps no points
    assert "ERT" in p.locator("dl.header").inner_text()
    dram = next(e for e in doc["ceilings"]["memory"] if e["level"] == "DRAM")
    text = page.hover_text(p.locator("figure[data-chart=roofline] g.roof[data-roof=memory][data-level=DRAM]"))
    assert f"{format_rate(dram['gbytes_per_s'])} GB/s" in text and "not recorded" in text
    page.close(tmp_path / "ert.png")


def test_comparison_of_three_machines(browser, tiny_run, tmp_path):
    inputs = [tiny_run / "ceilings.json", HANDWORKED, _ert_file(tmp_path)]
    out = _report(tmp_path, "compare.html", *inputs, "--labels", "tiny,handworked,ert-format")
    docs = [load_any_ceilings(path) for path in inputs]
    page = Page(browser, out)
    p = page.page
    chart = p.locator("figure[data-chart=roofline]")
    assert chart.count() == 1
    # One series per machine, each with every roof of its file, in its own colour.
    machines = chart.locator("button.tog[data-tag^=machine]")
    assert [machines.nth(i).get_attribute("data-tag") for i in range(machines.count())] == \
        ["machine0", "machine1", "machine2"]
    colours = set()
    for i, doc in enumerate(docs):
        assert chart.locator(f"g.roof[data-machine='{i}']").count() == _roof_count(doc)
        colours.add(chart.locator(f"g.roof[data-machine='{i}'] path.vis").first.get_attribute("stroke"))
    assert len(colours) == 3
    # Hover on the second machine's DRAM roof names the machine and its value.
    dram = next(e for e in docs[1]["ceilings"]["memory"] if e["level"] == "DRAM" and e["access"] == "rw"
                and e["precision"] == "fp64")
    text = page.hover_text(chart.locator("g.roof[data-machine='1'][data-roof=memory][data-level=DRAM]"
                                         "[data-access=rw][data-precision=fp64]"))
    assert "B: handworked" in text and f"{format_rate(dram['gbytes_per_s'])} GB/s" in text
    # Switching a machine off hides all of its roofs and none of the others'.
    chart.locator("button.tog[data-tag=machine2]").click()
    assert chart.locator("g.roof[data-machine='2']:visible").count() == 0
    assert chart.locator("g.roof[data-machine='0']:visible").count() > 0
    # The ratio table of ert compare (each against the first), and the unpaired ceilings apart.
    ratios = p.locator("table.ratios").inner_text()
    assert "B/A" in ratios and "C/A" in ratios
    from ert.consumers.compare import compare

    data = compare.to_json(docs, ["tiny", "handworked", "ert-format"])
    assert p.locator("table.ratios tbody tr").count() == sum(1 for c in data["ceilings"] if c["paired"])
    assert p.locator("table.unpaired tbody tr").count() == sum(1 for c in data["ceilings"] if not c["paired"])
    page.close(tmp_path / "compare.png")


def test_gh200_cpu_gpu_and_c2c_link_on_one_chart(browser, tmp_path):
    """A Grace Hopper pair (tests/test_arm_gh200.py: the Grace CPU rated from its recorded description, the H100
    and its NVLink-C2C link rated by the CUDA backend's tables; synthetic measured values): one roofline with the
    CPU's roofs, the GPU's roofs and the three C2C link roofs, each hovered and switched as its machine's."""
    from test_arm_gh200 import write_gh200_pair

    inputs = write_gh200_pair(tmp_path)
    out = _report(tmp_path, "gh200.html", *inputs, "--labels", "Grace CPU,H100 behind NVLink-C2C")
    docs = [load_any_ceilings(path) for path in inputs]
    page = Page(browser, out)
    chart = page.page.locator("figure[data-chart=roofline]")
    assert chart.count() == 1
    for i, doc in enumerate(docs):
        assert chart.locator(f"g.roof[data-machine='{i}']").count() == _roof_count(doc)
    links = chart.locator("g.roof[data-machine='1'][data-roof=transfer]")
    assert links.count() == 3
    h2d = next(e for e in docs[1]["ceilings"]["memory"] if e["level"] == "link-h2d")
    text = page.hover_text(chart.locator("g.roof[data-machine='1'][data-roof=transfer][data-level=link-h2d]"))
    assert "B: H100 behind NVLink-C2C" in text and f"{format_rate(h2d['gbytes_per_s'])} GB/s" in text
    assert "NVLink-C2C" in text
    fma = next(e for e in docs[0]["ceilings"]["compute"] if e["precision"] == "fp64" and e["fma"])
    text = page.hover_text(chart.locator("g.roof[data-machine='0'][data-roof=compute][data-precision=fp64]"
                                         "[data-fma=True]"))
    assert "A: Grace CPU" in text and format_rate(fma["gflops_per_s"]) in text
    chart.locator("button.tog[data-tag=machine1]").click()  # the GPU off: its roofs and its link go
    assert chart.locator("g.roof[data-machine='1']:visible").count() == 0
    assert chart.locator("g.roof[data-machine='0']:visible").count() > 0
    page.close(tmp_path / "gh200.png")


def check_two_host_report(run_dir: Path, tmp_path: Path) -> None:
    """The report of a run over two hosts (called by tests/test_cluster.py on the rig's run): its header and hosts
    table name both hosts, the chart holds every roof, network ones included, and a network roof's hover gives
    its value; in Chromium where there is one (the tests above skip, naming why, where there is none)."""
    out = _report(tmp_path, "two-hosts.html", run_dir)
    doc = load_any_ceilings(run_dir / "ceilings.json")
    page_text = out.read_text()
    assert "<h4>Hosts</h4>" in page_text and "node1, node2" in page_text
    # Per-host ceilings (issue 32's hosts section): a row per ceiling, each host's value and ratio to the median.
    assert "Per-host ceilings (value and ratio to the median of 2 hosts" in page_text
    from ert.consumers.compare.ceiling_values import ceiling_values

    from ert.consumers.report_model import HostGrid

    node2 = next(h for h in doc["hosts"] if h["host"] == "node2")
    name, value = next(iter(ceiling_values(node2["ceilings"]).items()))
    assert f"<td>{html.escape(name)}</td>" in page_text and f"{HostGrid.value_cell(value)} (" in page_text
    network = [e for e in doc["ceilings"]["memory"] if e.get("kind") == "network"]
    assert network and page_text.count('data-roof="transfer"') == len(network)
    executable = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return
    if executable is None:
        return
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = Page(browser, out)
        p = page.page
        assert p.locator("figure[data-chart=roofline] g.roof").count() == _roof_count(doc)
        inter = next(e for e in network if e["level"] == "net-inter-node")
        text = page.hover_text(p.locator("figure[data-chart=roofline] g.roof[data-roof=transfer]"
                                         "[data-level=net-inter-node]"))
        assert f"{format_rate(inter['gbytes_per_s'])} GB/s" in text and "latency" in text
        page.close(tmp_path / "two-hosts.png")
        browser.close()


def test_ert_run_report_flag(tiny_copy):
    """`ert-run --resume RUN --report` on a finished run measures nothing and writes RUN/report.html."""
    (tiny_copy / "report.html").unlink(missing_ok=True)
    proc = run_cmd("ert-run", "--resume", tiny_copy, "--report", "-q", timeout=300)
    assert proc.returncode == 0, proc.stderr
    page = (tiny_copy / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'data-chart="sweep"' in page
    assert f"report: {tiny_copy / 'report.html'}" in proc.stdout


@pytest.mark.parametrize("args, fragment", [
    (["nowhere"], "nowhere: no such file or directory"),
    (["{run}", "-o", "{tmp}/r.png"], "name it .html"),
    (["{run}", "{run}", "--labels", "one"], "1 label(s) for 2 inputs"),
])
def test_bad_input_is_one_line_and_no_file(tiny_run, tmp_path, args, fragment):
    args = [a.format(run=tiny_run, tmp=tmp_path) for a in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "r.html")]
    proc = run_cmd("ert", "report", *args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = stderr_lines(proc)
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert not any(tmp_path.glob("r.*"))
