"""ert plot: roofline (with application kernels) and sweep charts from a real run, written headless."""

from __future__ import annotations

import pytest

from conftest import REPO, run_cmd, stderr_lines
from ert.consumers.plots.plot import _fmt_rate

pytestmark = pytest.mark.slow  # every test here runs ert-run, pip or a tool as a process

DATA = REPO / "tests" / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_roofline_png_and_svg_from_a_real_run(tiny_run, tmp_path):
    png, svg = tmp_path / "roof.png", tmp_path / "roof.svg"
    proc = run_cmd("ert", "plot", tiny_run, "--app", DATA / "app-handworked.yaml", "-o", png)
    assert proc.returncode == 0, proc.stderr
    width, height = _png_size(png)
    assert width > 1000 and height > 700  # 150 dpi: readable in a report
    proc = run_cmd("ert", "plot", tiny_run / "ceilings.json", "--app", DATA / "app-handworked.yaml", "-o", svg)
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    # Roofs carry values and units, ridge points are explained, every kernel is named, and the title says where.
    import json

    doc = json.loads((tiny_run / "ceilings.json").read_text())
    # The roofs are fp64 read+write; which levels a tiny run separates depends on the machine's noise.
    roofs = [e for e in doc["ceilings"]["memory"] if e["precision"] == "fp64" and e["access"] == "rw"]
    assert roofs
    for roof in roofs:
        assert f"{roof['level']} {_fmt_rate(roof['gbytes_per_s'])}" in text  # the plot's own number format
    assert "GB/s" in text and "GFLOP/s" in text
    assert "ridge points" in text
    for name in ("stencil", "dgemm-block", "stream-sum"):
        assert name in text
    assert doc["metadata"]["host"] in text and "numba-cpu" in text


def test_sweep_plot(tiny_run, tmp_path):
    out = tmp_path / "sweep.svg"
    proc = run_cmd("ert", "plot", tiny_run, "--sweep", "-o", out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "working set" in text and "FLOPs per element" in text
    # Every shaded plateau is labelled with its level and its value (the cache hints carry sizes, never rates).
    import json
    import re

    labels = [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", text)]
    doc = json.loads((tiny_run / "ceilings.json").read_text())
    shaded = [e for e in doc["ceilings"]["memory"] if e["precision"] == "fp64"]
    assert shaded
    for e in shaded:
        rate = _fmt_rate(e["gbytes_per_s"])
        at = [i for i, label in enumerate(labels) if label == rate]
        assert any(e["level"] in labels[max(0, i - 2):i] for i in at), (e["level"], rate)


@pytest.mark.parametrize("args, fragment", [
    (["-o", "{tmp}/roof.jpg"], "unknown image format 'jpg'"),
    (["--app", "{tmp}/missing.yaml", "-o", "{tmp}/roof.png"], "no such file"),
])
def test_plot_errors_leave_no_file(tiny_run, tmp_path, args, fragment):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_cmd("ert", "plot", tiny_run, *args)
    lines = stderr_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1 and fragment in lines[0], proc.stderr
    assert not list(tmp_path.iterdir())
