"""ert profile: application data (ncu CSV long/raw, YAML) on the hierarchical roofline, numbers checked by hand."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, run_cmd, stderr_lines
from ert.consumers.profile.appdata import load_app
from ert.interop.kernel_data import parse_number, unit_scale
from ert.records.ceilings_io import load_ceilings
from ert.errors import ErtError
from ert.consumers.profile.profile import fma_ratio_ceiling, profile_all

DATA = REPO / "tests" / "data"
CPU = DATA / "ceilings-handworked-cpu.json"  # fp64 rw: L1 400, L2 200, L3 100, DRAM 25 GB/s; FP64 FMA 100 GFLOP/s
GPU = DATA / "ceilings-handworked-gpu.json"  # fp64 rw: L1 10000, L2 4000, HBM 800 GB/s; FP64 FMA 7000 GFLOP/s


def _by_name(profiles):
    return {p.name: p.results[0] for p in profiles}


def test_handworked_yaml_kernels():
    res = _by_name(profile_all(load_app(DATA / "app-handworked.yaml"), load_ceilings(CPU)))

    # stencil: 2.0e8 FLOPs in 0.01 s = 20 GFLOP/s.
    #   AI L1 = 2e8/8e8 = 0.25 -> 0.25 x 400 = 100;  AI L2 = 2e8/4e8 = 0.5 -> 0.5 x 200 = 100
    #   AI DRAM = 2e8/1e8 = 2 -> 2 x 25 = 50;  compute: FP64 FMA peak 100
    #   attainable = min(100, 100, 50, 100) = 50, bound by DRAM; 20/50 = 40 %
    s = res["stencil"]
    assert s.gflops_per_s == pytest.approx(20.0)
    assert [lv.ai_flops_per_byte for lv in s.levels] == pytest.approx([0.25, 0.5, 2.0])
    assert [lv.bound_gflops_per_s for lv in s.levels] == pytest.approx([100.0, 100.0, 50.0])
    assert s.attainable_gflops_per_s == pytest.approx(50.0)
    assert s.binding == "DRAM bandwidth"
    assert s.percent_of_attainable == pytest.approx(40.0)

    # dgemm-block: 1.6e8 FLOPs in 0.004 s = 40 GFLOP/s; AI L1 1.6 -> 640, L2 8 -> 1600, DRAM 40 -> 1000.
    #   fma_ratio f = 0.5: ceiling (2 x 0.5 + 1 - 0.5)/2 x 100 = 0.75 x 100 = 75 < every memory bound
    #   40/75 = 53.33 %
    d = res["dgemm-block"]
    assert [lv.bound_gflops_per_s for lv in d.levels] == pytest.approx([640.0, 1600.0, 1000.0])
    assert d.compute_gflops_per_s == pytest.approx(75.0)
    assert d.binding.startswith("FP64 FMA-ratio ceiling")
    assert d.percent_of_attainable == pytest.approx(100 * 40 / 75)

    # stream-sum: 1e7 FLOPs in 0.002 s = 5 GFLOP/s; AI L1 = 1e7/4e8 = 0.025 -> 10; L2 = 1 -> 200.
    #   attainable 10, bound by L1; 5/10 = 50 %
    t = res["stream-sum"]
    assert t.attainable_gflops_per_s == pytest.approx(10.0)
    assert t.binding == "L1 bandwidth"
    assert t.percent_of_attainable == pytest.approx(50.0)


def test_fma_ratio_ceiling_matches_seed_004():
    # GPP on V100: 58 % FMA -> (2 x 0.58 + 1 - 0.58)/2 = 0.79 of the 6.71 TFLOP/s peak = 5.3 TFLOP/s.
    assert fma_ratio_ceiling(fma_ratio=0.58, fma_peak_gflops_per_s=6710) == pytest.approx(0.79 * 6710)
    assert fma_ratio_ceiling(fma_ratio=0.0, fma_peak_gflops_per_s=100) == pytest.approx(50)  # adds/muls only
    with pytest.raises(ErtError):
        fma_ratio_ceiling(fma_ratio=1.5, fma_peak_gflops_per_s=100)


@pytest.mark.parametrize("name", ["ncu-long.csv", "ncu-raw.csv"])
def test_ncu_layouts_give_the_handworked_numbers(name):
    kernels = {k.name: k for k in load_app(DATA / name)}
    gpp = kernels["gpp_kernel(double*, double*, int)"]
    # time "2.00" msecond (long) / "2,000.00" usecond (raw) = 0.002 s
    # FLOPs = dadd 1e9 + dmul 1e9 + 2 x dfma 3e9 = 8e9; f = 3e9 / (1e9 + 1e9 + 3e9) = 0.6
    # bytes: L1 4.00 Gbyte = 4e9; L2 "2,000.00" Mbyte = 2e9; DRAM 1.00 Gbyte = 1e9 (decimal prefixes)
    assert gpp.seconds == pytest.approx(0.002)
    assert gpp.flops == pytest.approx({"fp64": 8e9})
    assert gpp.fma_ratio["fp64"] == pytest.approx(0.6)
    assert gpp.bytes == pytest.approx({"L1": 4e9, "L2": 2e9, "DRAM": 1e9})
    # axpy: two launches summed: 100 usecond + "100,000" nsecond = 2e-4 s; 2 x (2 x 1e6) = 4e6 FLOPs;
    # each level 2 x 24 MB = 4.8e7 bytes ("24,000.00" Kbyte, "24.00" Mbyte and "24,000,000" byte alike)
    axpy = kernels["void axpy<double>(int, double, double const*, double*)"]
    assert axpy.launches == 2
    assert axpy.seconds == pytest.approx(2e-4)
    assert axpy.flops == pytest.approx({"fp64": 4e6})
    assert axpy.bytes == pytest.approx({"L1": 4.8e7, "L2": 4.8e7, "DRAM": 4.8e7})

    res = _by_name(profile_all(list(kernels.values()), load_ceilings(GPU)))
    g = res["gpp_kernel(double*, double*, int)"]
    # 8e9 / 0.002 = 4000 GFLOP/s. AI: L1 2 -> 20000, L2 4 -> 16000, DRAM->HBM 8 x 800 = 6400.
    # FMA-ratio ceiling (2 x 0.6 + 0.4)/2 x 7000 = 0.8 x 7000 = 5600: binds; 4000/5600 = 71.4 %
    assert g.gflops_per_s == pytest.approx(4000)
    assert [lv.roof_level for lv in g.levels] == ["L1", "L2", "HBM"]
    assert g.attainable_gflops_per_s == pytest.approx(5600)
    assert g.percent_of_attainable == pytest.approx(100 * 4000 / 5600)
    a = res["void axpy<double>(int, double, double const*, double*)"]
    # 4e6 / 2e-4 = 20 GFLOP/s; AI 4e6/4.8e7 = 1/12; HBM bound 800/12 = 66.67; 20/66.67 = 30 %
    assert a.binding == "HBM bandwidth"
    assert a.percent_of_attainable == pytest.approx(30.0)


def test_cli_fma_ratio_override_json():
    proc = run_cmd("ert", "profile", DATA / "ncu-raw.csv", "--ceilings", GPU, "--fma-ratio", "100%", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    gpp = out["kernels"][0]["results"][0]
    # f = 1: ceiling = the FMA peak 7000; HBM's 6400 now binds: 4000/6400 = 62.5 %
    assert gpp["fma_ratio_source"] == "--fma-ratio"
    assert gpp["binding"] == "HBM bandwidth"
    assert gpp["percent_of_attainable"] == pytest.approx(62.5)


def test_numbers_and_units_as_ncu_prints_them():
    assert parse_number("1,234,567.5", where="x", path="f") == 1234567.5
    assert parse_number("n/a", where="x", path="f") is None
    with pytest.raises(ErtError, match="decimal comma"):
        parse_number("9,00", where="x", path="f")
    assert unit_scale("usecond", where="x", path="f") == ("time", 1e-6)
    assert unit_scale("Kbyte", where="x", path="f") == ("byte", 1e3)
    assert unit_scale("cycle/nsecond", where="x", path="f") == ("cycle/time", pytest.approx(1e9))
    with pytest.raises(ErtError, match="unknown unit"):
        unit_scale("furlong", where="x", path="f")


def _one_line_error(proc, *, fragment: str):
    lines = stderr_lines(proc)
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


def _long_without(metric: str, path):
    kept = [line for line in (DATA / "ncu-long.csv").read_text().splitlines() if f'"{metric}"' not in line]
    path.write_text("\n".join(kept) + "\n")
    return path


@pytest.mark.parametrize("case", ["missing time", "missing flops", "unknown layout", "wrong shape", "no time yaml",
                                  "corrupt ceilings", "bad unit"])
def test_bad_input_is_one_clear_line(case, tmp_path):
    app, ceilings = DATA / "app-handworked.yaml", CPU
    if case == "missing time":
        app, fragment = _long_without("gpu__time_duration.sum", tmp_path / "a.csv"), "has no time"
    elif case == "missing flops":
        app = _long_without("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", tmp_path / "a.csv")
        fragment = "missing metric sm__sass_thread_inst_executed_op_dfma_pred_on.sum"
    elif case == "unknown layout":
        app = tmp_path / "a.csv"
        app.write_text('"Kernel","Time"\n"k","1"\n')
        fragment = "unknown ncu CSV layout"
    elif case == "wrong shape":
        app = tmp_path / "a.csv"
        lines = (DATA / "ncu-long.csv").read_text().splitlines()
        lines[9] = lines[9].rsplit(",", 1)[0]  # a row that lost its last field
        app.write_text("\n".join(lines) + "\n")
        fragment = "CSV of the wrong shape"
    elif case == "no time yaml":
        app = tmp_path / "a.yaml"
        app.write_text("kernels:\n  - name: k\n    flops: {fp64: 1.0e9}\n    bytes: {DRAM: 1.0e9}\n")
        fragment = "kernel 'k' has no time"
    elif case == "corrupt ceilings":
        ceilings = tmp_path / "c.json"
        ceilings.write_text(CPU.read_text()[:200])
        fragment = "invalid JSON"
    else:
        app = tmp_path / "a.csv"
        app.write_text((DATA / "ncu-long.csv").read_text().replace('"msecond"', '"parsec"'))
        fragment = "unknown unit 'parsec'"
    proc = run_cmd("ert", "profile", app, "--ceilings", ceilings)
    _one_line_error(proc, fragment=fragment)
