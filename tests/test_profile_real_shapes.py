"""ert profile on ncu exports in the shapes real users have (fixtures written here, numbers worked by hand)."""

from __future__ import annotations

import pytest

from ert import cli
from ert.consumers.profile.appdata import load_app
from ert.errors import ErtError
from conftest import REPO, run_cmd, stderr_lines

DATA = REPO / "tests" / "data"

GPU = str(REPO / "tests" / "data" / "ceilings-handworked-gpu.json")  # HBM 800 GB/s, FP64 FMA 7000 GFLOP/s

# `ncu --csv --section LaunchStats --metrics ...`: rule columns in the header, metric rows 13 fields + trailing comma
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context","Stream",'
          '"Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description"')


def _row(launch, kernel, metric, unit, value):
    return (f'"{launch}","1","app","127.0.0.1","{kernel}","2026-Nov-21 12:00:00","1","7","Command line profiler '
            f'metrics","{metric}","{unit}","{value}",')


def _ops(launch, kernel, dadd, dmul, dfma):
    return [_row(launch, kernel, f"sm__sass_thread_inst_executed_op_d{op}_pred_on.sum", "inst", v)
            for op, v in (("add", dadd), ("mul", dmul), ("fma", dfma))]


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rule_columns_zero_flop_kernel_and_exceeding_roof(tmp_path, capsys):
    lines = ['==PROF== Connected to process 1 (app)', HEADER,
             '"0","1","app","127.0.0.1","k","t","1","7","LaunchStats","","","","LaunchConfiguration","OPT","a rule"',
             _row(0, "k", "gpu__time_duration.sum", "nsecond", "1,000,000"),
             _row(0, "k", "dram__bytes.sum", "Gbyte", "2.00"),
             *_ops(0, "k", "100,000,000", "0", "450,000,000"),
             _row(1, "fill", "gpu__time_duration.sum", "nsecond", "1,000"),
             _row(1, "fill", "dram__bytes.sum", "byte", "1,000"),
             *_ops(1, "fill", "0", "0", "0")]
    path = _write(tmp_path, "sections.csv", lines)
    kernels = load_app(path)
    k, fill = kernels
    # 1e8 adds + 2 x 4.5e8 FMAs = 1e9 FLOPs in 1 ms; 2 GB of DRAM
    assert k.flops == {"fp64": 1e9} and k.seconds == pytest.approx(1e-3) and k.bytes == {"DRAM": 2e9}
    assert fill.flops == {}
    assert cli.main(["profile", str(path), "--ceilings", GPU]) == 0
    out = capsys.readouterr().out
    # achieved 1e9 / 1e-3 s = 1,000 GFLOP/s; AI 0.5 x HBM 800 = 400 attainable: 250% -> warned
    assert "achieved 1,000 GFLOP/s; attainable 400 GFLOP/s" in out and "250% of attainable" in out
    assert "WARNING: achieved 1,000 GFLOP/s exceeds the attainable 400 GFLOP/s" in out
    assert "kernel fill" in out and "no floating-point work" in out


def test_two_passes_merge_by_launch(tmp_path):
    mem = _write(tmp_path, "mem.csv", [HEADER, _row(0, "k", "gpu__time_duration.sum", "msecond", "1"),
                                       _row(0, "k", "dram__bytes.sum", "byte", "1,000,000,000")])
    # the FLOP pass: time inflated by replay (150 ms), counts 2e8 adds + 4e8 FMAs = 1e9 FLOPs
    flop = _write(tmp_path, "flop.csv", [HEADER, _row(0, "k", "gpu__time_duration.sum", "msecond", "150"),
                                         *_ops(0, "k", "200,000,000", "0", "400,000,000")])
    with pytest.raises(ErtError, match="no FLOP counts in this file.*memory-only pass"):
        load_app(mem)
    (k,) = load_app(flop, mem)  # either order: the file with byte metrics gives the time
    assert k.seconds == pytest.approx(1e-3) and k.flops == {"fp64": 1e9} and k.bytes == {"DRAM": 1e9}
    assert k.fma_ratio["fp64"] == pytest.approx(4e8 / 6e8)


def test_metric_variants_rate_and_ncu2026_names(tmp_path):
    lines = [HEADER, _row(0, "k", "sm__cycles_elapsed.avg", "cycle", "1,000,000"),
             _row(0, "k", "sm__cycles_elapsed.avg.per_second", "cycle/second", "1,000,000,000"),  # 1 ms
             _row(0, "k", "dram__bytes.sum.per_second", "byte/second", "500,000,000,000"),  # x 1 ms = 5e8 B
             _row(0, "k", "lts__t_sectors_op_read.sum", "sector", "1,000"),
             _row(0, "k", "lts__t_sectors_op_write.sum", "sector", "1,000"),  # 2000 x 32 B = 64 kB
             *_ops(0, "k", "1", "1", "1")]
    (k,) = load_app(_write(tmp_path, "rate.csv", lines))
    assert k.bytes == {"L2": 64000.0, "DRAM": pytest.approx(5e8)}
    assert any("per_second x kernel time" in n for n in k.notes)
    lines = [HEADER, _row(0, "k", "gpu__time_duration.sum", "ns", "1,000"),
             _row(0, "k", "dram__bytes_op_read.sum", "byte", "3,000"),
             _row(0, "k", "dram__bytes_op_write.sum", "byte", "1,000"),
             _row(0, "k", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "10"),
             _row(0, "k", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "sector", "2"),
             *_ops(0, "k", "1", "0", "0")]
    (k,) = load_app(_write(tmp_path, "ncu2026.csv", lines))
    assert k.bytes == {"DRAM": 4000.0, "L1": 384.0}  # (10 + 2) x 32 B


def test_decimal_comma_export(tmp_path):
    lines = [HEADER, _row(0, "k", "gpu__time_duration.sum", "nsecond", "1.000.000"),  # 1 ms
             _row(0, "k", "dram__bytes.sum", "byte", "2.000.000.000"),
             _row(0, "k", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "65,77"),
             *_ops(0, "k", "0", "0", "1.000.000,5")]
    (k,) = load_app(_write(tmp_path, "de.csv", lines))
    assert k.seconds == pytest.approx(1e-3) and k.bytes == {"DRAM": 2e9} and k.flops == {"fp64": 2000001.0}
    assert any("decimal comma" in n for n in k.notes)


@pytest.mark.parametrize("lines, message", [
    (["==1== NVPROF is profiling process 1, command: ./a", '"Device","Kernel","Invocations","Metric Name",'
      '"Metric Description","Min","Max","Avg"', '"K20c (0)","k",3,"flop_count_sp","FLOPs",1,1,1'],
     "nvprof output is not supported"),
    (["==PROF== Connected to process 7 (/usr/bin/python3)", "==PROF== Disconnected from process 7",
      "==ERROR== The application returned an error code (1)."],
     "the profiled run failed (==ERROR== The application returned an error code (1).)"),
    ([HEADER, _row(0, "k", "gpu__time_duration.sum", "nsecond", "n/a"), *_ops(0, "k", "1", "1", "1"),
      _row(0, "k", "dram__bytes.sum", "byte", "1")], "gpu__time_duration.sum is present but n/a"),
])
def test_refused_with_the_real_cause(tmp_path, capsys, lines, message):
    path = _write(tmp_path, "app.out", lines)
    assert cli.main(["profile", str(path), "--ceilings", GPU]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0 and "Traceback" not in err


def test_a_text_that_only_mentions_nvprof_or_ncu_markers_is_not_taken_for_their_output(tmp_path):
    """Detection is by the tools' own line starts, not by words anywhere: a note about nvprof is no nvprof file."""
    note = tmp_path / "notes.md"
    note.write_text('# notes\nnvprof wrote "Device","Kernel","Invocations","Metric Name","Metric Description" '
                    'and NVPROF banners; ncu writes ==PROF== lines.\n')
    proc = run_cmd("ert", "profile", note, "--ceilings", DATA / "ceilings-handworked-gpu.json")
    assert proc.returncode == 2 and len(stderr_lines(proc)) == 1
    assert "nvprof" not in proc.stderr and "==PROF==" not in proc.stderr and "unknown ncu CSV layout" in proc.stderr


def test_a_kernel_row_that_lost_its_opening_quote_is_reported(tmp_path, capsys):
    """Such a row was skipped as if it were the application's output, and its kernel silently dropped."""
    rows = [HEADER, _row(0, "k", "gpu__time_duration.sum", "nsecond", "1000"), *_ops(0, "k", "1", "1", "1"),
            _row(0, "k", "dram__bytes.sum", "byte", "1000")]
    rows[3] = rows[3][1:]
    path = _write(tmp_path, "app.csv", rows)
    assert cli.main(["profile", str(path), "--ceilings", GPU]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "line 4" in err and "lost its opening quote" in err


@pytest.mark.parametrize("value", ["1e300", "1e-300"])
def test_a_metric_no_float_computes_with_is_refused(tmp_path, capsys, value):
    """ncu's time of 1e-300 s made the kernel's rate infinite on the plot; it is one error line now."""
    rows = [HEADER, _row(0, "k", "gpu__time_duration.sum", "nsecond", value), *_ops(0, "k", "1", "1", "1"),
            _row(0, "k", "dram__bytes.sum", "byte", "1000")]
    path = _write(tmp_path, "app.csv", rows)
    assert cli.main(["profile", str(path), "--ceilings", GPU]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "out of range" in err
