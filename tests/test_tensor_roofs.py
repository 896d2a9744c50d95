"""Tensor and integer roofs in the consumers (issue 16): profile, plot, compare, export, show; numbers by hand."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import REPO, run_cmd
from ert.records.ceilings_io import validate
from ert.consumers import roofs as roofs_mod

GPU = REPO / "tests" / "data" / "ceilings-handworked-gpu.json"


def _compute(precision, gflops, **extra):
    return {"precision": precision, "fma": extra.pop("fma", True), "gflops_per_s": gflops, "spread": 0.01, **extra}


def a100_doc() -> dict:
    """An A100-like ceilings file (schema 1.5): fp64 rw L1 15000, L2 4000, HBM 1400 GB/s; FP64 FMA 9700,
    FP16 FMA 78000 GFLOP/s (vector); FP16 tensor 290000, FP64 tensor 19000 GFLOP/s; INT32 19500 GIOP/s."""
    doc = json.loads(GPU.read_text())
    doc["schema_version"] = "1.5"
    for m, value in zip(doc["ceilings"]["memory"], (15000.0, 4000.0, 1400.0)):
        m["gbytes_per_s"] = value
    tensor = {"pipe": "tensor", "unit": "GFLOP/s", "accumulate": "f32", "input_type": "f16", "mma_shape": "m16n8k16",
              "flops_per_mma": 4096, "flops_per_element": 4096}
    doc["ceilings"]["compute"] = [
        _compute("fp64", 9700.0), _compute("fp16", 78000.0),
        _compute("int32", 19500.0, fma=False, giops_per_s=19500.0, unit="GIOP/s"),
        _compute("fp16", 290000.0, **tensor),
        _compute("bf16", 288000.0, **{**tensor, "input_type": "bf16"}),
        _compute("fp64", 19000.0, **{**tensor, "accumulate": "f64", "input_type": "f64", "mma_shape": "m8n8k4",
                                     "flops_per_mma": 512, "flops_per_element": 512}),
    ]
    validate(doc)
    return doc


# A 4096 x 4096 x 4096 GEMM, FP16 inputs, FP32 accumulate, on an A100 (CC 8.0), as Nsight Compute reports it:
#   FLOPs = 2 x 4096^3 = 137,438,953,472; as mma.sync m16n8k16 (HMMA.16816, 2 x 16 x 8 x 16 = 4096 FLOPs
#   per warp-level instruction): 137,438,953,472 / 4096 = 33,554,432 tensor instructions.
#   Time 0.55 ms -> 137,438,953,472 / 0.00055 s = 249,889 GFLOP/s.
#   DRAM bytes: A and B (2 x 4096^2 x 2 B) + C (4096^2 x 4 B) = 134,217,728 -> AI 1024 FLOP/B;
#   L2 4x that (536,870,912 -> AI 256), L1 16x (2,147,483,648 -> AI 64).
#   Bounds: HBM 1024 x 1400 = 1,433,600; L2 256 x 4000 = 1,024,000; L1 64 x 15000 = 960,000;
#   FP16 tensor roof 290,000 binds: 249,889 / 290,000 = 86.17 % of attainable.
#   (Under the vector FP16 FMA roof, 78,000, it would sit at 320 %: the "far above every roof".)
#   Integer work: 2,000,000,000 integer instructions (address arithmetic) -> 3,636.4 GIOP/s;
#   AI: HBM 14.90 -> 20,862; L2 3.725 -> 14,901; L1 0.9313 -> 13,970 GIOP/s, below the INT32 roof 19,500:
#   L1 binds; 3,636.4 / 13,969.8 = 26.03 %.
GEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_nn"
METRICS = (("gpu__time_duration.sum", "msecond", "0.55"), ("dram__bytes.sum", "byte", "134,217,728"),
           ("lts__t_bytes.sum", "Mbyte", "536.870912"), ("l1tex__t_bytes.sum", "Gbyte", "2.147483648"),
           ("sm__inst_executed_pipe_tensor_op_hmma.sum", "inst", "33,554,432"),
           ("sm__inst_executed_pipe_tensor_op_dmma.sum", "inst", "0"),
           ("sm__sass_thread_inst_executed_op_integer_pred_on.sum", "inst", "2,000,000,000"),
           *((f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum", "inst", "0") for p in "dfh"
             for op in ("add", "mul", "fma")))


def _ncu_csv(path, cc="8.0"):
    header = '"ID","Kernel Name","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    lines = [header] + [f'"0","{GEMM}","0","{cc}","Command line profiler metrics","{m}","{u}","{v}"'
                        for m, u, v in METRICS]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ert_profile_places_a_tensor_core_gemm_under_the_tensor_roof(tmp_path):
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps(a100_doc()))
    proc = run_cmd("ert", "profile", _ncu_csv(tmp_path / "gemm.csv"), "--ceilings", ceilings, "--json")
    assert proc.returncode == 0, proc.stderr
    results = {r["precision"]: r for r in json.loads(proc.stdout)["kernels"][0]["results"]}
    assert set(results) == {"tensor-fp16", "int32"}  # no vector FP work; DMMA count 0
    t = results["tensor-fp16"]
    assert t["flops"] == 137438953472 and t["gflops_per_s"] == pytest.approx(249889.0, abs=1)
    assert [lv["ai_flops_per_byte"] for lv in t["levels"]] == pytest.approx([64, 256, 1024])
    assert [lv["bound_gflops_per_s"] for lv in t["levels"]] == pytest.approx([960000, 1024000, 1433600])
    assert t["binding"] == "FP16 tensor (m16n8k16, f32 accumulate) peak"
    assert t["attainable_gflops_per_s"] == 290000.0
    assert t["percent_of_attainable"] == pytest.approx(86.17, abs=0.01)
    assert any("x 4096 FLOPs per warp-level HMMA instruction (sm_80" in n for n in t["notes"])
    i = results["int32"]
    assert i["unit"] == "GIOP/s" and i["gflops_per_s"] == pytest.approx(3636.4, abs=0.1)
    assert i["binding"] == "L1 bandwidth" and i["percent_of_attainable"] == pytest.approx(26.03, abs=0.01)
    text = run_cmd("ert", "profile", tmp_path / "gemm.csv", "--ceilings", ceilings).stdout
    assert "compute ceiling: FP16 tensor (m16n8k16, f32 accumulate) peak = 290,000 GFLOP/s" in text
    assert "achieved 3,636 GIOP/s" in text and "bound GIOP/s" in text




@pytest.mark.parametrize("cc, per, words", [("7.0", 512, "x 512 FLOPs"), ("9.0", 4096, "sm_90"),
                                            ("10.0", None, "no FLOPs per HMMA instruction known for sm_100")])
def test_flops_per_tensor_instruction_by_architecture(tmp_path, cc, per, words):
    from ert.consumers.profile.appdata import load_app

    kernel = load_app(_ncu_csv(tmp_path / "k.csv", cc=cc))[0]
    if per is None:
        assert "tensor-fp16" not in kernel.flops
    else:
        assert kernel.flops["tensor-fp16"] == 33554432 * per
    assert any(words in n for n in kernel.notes), kernel.notes


def test_a_dmma_count_on_sm_90_says_the_wide_shape_does_8x(tmp_path):
    """sm_90 has DMMA.16x8x16 (m16n8k16, 4096 FLOPs) beside DMMA.884 (512, the count assumed): the note says so."""
    from ert.consumers.profile.appdata import load_app

    path = _ncu_csv(tmp_path / "k.csv", cc="9.0")
    path.write_text(path.read_text().replace('"sm__inst_executed_pipe_tensor_op_dmma.sum","inst","0"',
                                             '"sm__inst_executed_pipe_tensor_op_dmma.sum","inst","1000"'))
    kernel = load_app(path)[0]
    assert kernel.flops["tensor-fp64"] == 1000 * 512
    assert any("x 512 FLOPs per warp-level DMMA instruction (sm_90 (DMMA.8x8x4; sm_90's DMMA.16x8x16" in n
               for n in kernel.notes), kernel.notes


def test_nothing_picks_a_tensor_integer_or_mix_entry_as_the_fp_roof():
    doc = a100_doc()
    doc["ceilings"]["compute"].insert(0, _compute("fp64", 99999.0, mix="fma+add", mix_ratio="1 FMA : 1 add"))
    # Tensor FP64 (19000) and the mix (99999) are faster than the vector FP64 FMA roof: neither may be taken.
    assert roofs_mod.fma_roof(doc, "fp64").gflops_per_s == 9700.0
    assert roofs_mod.fma_roof(doc, "fp16").gflops_per_s == 78000.0
    assert [r.precision for r in roofs_mod.compute_roofs(doc)] == ["fp64", "fp16"]
    extra = roofs_mod.extra_roofs(doc)
    assert [(r.group, r.precision) for r in extra] == [("integer", "int32"), ("tensor", "fp16"), ("tensor", "bf16"),
                                                       ("tensor", "fp64"), ("mix", "fp64")]
    assert roofs_mod.tensor_roof(doc, "fp64").value == 19000.0
    assert roofs_mod.tensor_roof(doc, "tf32") is None
    without_fp16 = copy.deepcopy(doc)
    without_fp16["ceilings"]["compute"] = [c for c in doc["ceilings"]["compute"]
                                           if not (c.get("pipe") == "tensor" and c["precision"] == "fp16")]
    assert roofs_mod.tensor_roof(without_fp16, "fp16").precision == "bf16"  # same rate per NVIDIA


def test_ert_plot_draws_the_extra_roofs_grouped_with_a_legend(tmp_path):
    doc = a100_doc()
    # Five tensor roofs: only the EXTRA_PER_GROUP (3) fastest are drawn.
    for precision, value in (("tf32", 145000.0), ("fp8", 100.0)):
        doc["ceilings"]["compute"].append(_compute(precision, value, pipe="tensor", unit="GFLOP/s"))
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps(doc))
    out = tmp_path / "roofline.svg"
    proc = run_cmd("ert", "plot", ceilings, "--app", _ncu_csv(tmp_path / "gemm.csv"), "-o", out)
    assert proc.returncode == 0, proc.stderr
    svg = out.read_text()
    for text in ("more compute roofs", "tensor cores (GFLOP/s)", "integer (GIOP/s)",
                 "FP16 tensor (m16n8k16, f32 accumulate) 290,000 GFLOP/s", "INT32 multiply-add 19,500 GIOP/s",
                 "TF32 tensor 145,000 GFLOP/s", "FP64 FMA 9,700 GFLOP/s", "tensor-fp16"):
        assert text in svg, text
    assert "BF16 tensor (m16n8k16, f32 accumulate) 288,000" in svg
    assert "FP8 tensor" not in svg and "FP64 tensor" not in svg  # the 4th and 5th tensor roofs


def test_compare_pairs_by_pipe_and_labels_units(tmp_path):
    from ert.consumers.compare.compare import comparison_rows as compare_rows

    a, b = a100_doc(), a100_doc()
    b["ceilings"]["compute"] = [c for c in b["ceilings"]["compute"] if c.get("pipe") != "tensor"
                                or c["precision"] == "fp16"]
    rows = {r.label: r for r in compare_rows([a, b])}
    # The vector FP16 FMA roof and the FP16 tensor roof are separate rows, never paired with each other.
    assert rows["fp16 FMA peak"].values == [78000.0, 78000.0]
    tensor = rows["fp16 tensor m16n8k16, f32 accumulate peak"]
    assert tensor.values == [290000.0, 290000.0] and tensor.unit == "GFLOP/s"
    assert rows["fp64 tensor m8n8k4, f64 accumulate peak"].values == [19000.0, None]
    assert rows["int32 multiply-add peak"].unit == "GIOP/s"
    for name, doc in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    proc = run_cmd("ert", "compare", tmp_path / "a.json", tmp_path / "b.json")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("fp16 tensor"))
    assert "GFLOP/s" in line and "290,000" in line.replace("290000", "290,000")
    assert "fp64 tensor m8n8k4, f64 accumulate peak: only in A" in proc.stdout


def test_export_carries_tensor_and_integer_roofs_and_reads_back(tmp_path):
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps(a100_doc()))
    out = tmp_path / "roofline.json"
    proc = run_cmd("ert", "export", ceilings, "--format", "ert", "-o", out)
    assert proc.returncode == 0, proc.stderr
    ert = json.loads(out.read_text())["empirical"]["gflops"]
    assert ert["data"][:2] == [["FP64 GFLOPs", 9700.0], ["FP16 GFLOPs", 78000.0]]
    assert ["FP16 Tensor GFLOPs", 290000.0] in ert["data"] and ["BF16 Tensor GFLOPs", 288000.0] in ert["data"]
    assert ert["metadata"]["TENSOR"]["FP64 Tensor GFLOPs"]["mma_shape"] == "m8n8k4"
    assert ert["metadata"]["INTEGER_GIOPS"] == {"INT32": 19500.0}
    assert not any("INT" in row[0] for row in ert["data"])  # integer operations are not FLOPs
    # Read back (ert show reads ERT's roofline.json): tensor rows stay tensor roofs, FP16 FMA stays 78000.
    proc = run_cmd("ert", "show", out)
    assert proc.returncode == 0, proc.stderr
    from ert.interop.ert_results import load_any_ceilings

    back = load_any_ceilings(out)
    assert roofs_mod.fma_roof(back, "fp16").gflops_per_s == 78000.0
    assert roofs_mod.tensor_roof(back, "fp64").entry["accumulate"] == "f64"
    csv_text = run_cmd("ert", "export", ceilings, "--format", "csv").stdout
    assert "compute,INT32 multiply-add,,int32,,false,19500.0,GIOP/s" in csv_text
    assert 'compute,"FP16 tensor (m16n8k16, f32 accumulate)",,fp16,,true,290000.0,GFLOP/s' in csv_text


def show_lines(tmp_path, doc: dict) -> list[str]:
    """`ert show` of ``doc``, line by line."""
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps(doc))
    proc = run_cmd("ert", "show", ceilings)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_ert_show_lists_tensor_roofs_in_their_own_table(tmp_path):
    lines = show_lines(tmp_path, a100_doc())
    start = lines.index("Tensor-core compute (warp-level MMA; a multiply-add is 2 FLOPs)")
    assert lines[start + 1].split() == ["precision", "input", "accumulate", "shape", "GFLOP/s", "spread",
                                        "FLOPs/MMA", "noisy"]
    assert lines[start + 2].split()[:7] == ["fp16", "f16", "f32", "m16n8k16", "290000", "1.0%", "4096"]
    vector = lines[lines.index("Compute") + 1: start]
    assert not any("290000" in line for line in vector)  # tensor roofs are not in the vector table


def int8_doc() -> dict:
    """a100_doc with an INT8 tensor roof (schema 1.9): 600,000 GIOP/s through mma.sync m16n8k32 (IMMA), s32."""
    doc = a100_doc()
    doc["schema_version"] = "1.9"
    doc["ceilings"]["compute"].append(_compute(
        "int8", 600000.0, pipe="tensor", unit="GIOP/s", giops_per_s=600000.0, input_type="s8", accumulate="s32",
        mma_shape="m16n8k32", flops_per_mma=8192, flops_per_element=8192, instruction="mma.sync"))
    validate(doc)
    return doc


def test_an_int8_tensor_roof_validates_and_is_a_giops_tensor_roof():
    doc = int8_doc()
    bad = copy.deepcopy(doc)
    bad["ceilings"]["compute"][-1]["accumulate"] = "s64"
    with pytest.raises(Exception, match="s64"):
        validate(bad)
    roof = roofs_mod.tensor_roof(doc, "int8")
    assert (roof.group, roof.unit, roof.value) == ("tensor", "GIOP/s", 600000.0)
    assert roof.name == "INT8 tensor (mma.sync m16n8k32, s32 accumulate)"
    # Neither an integer roof of the vector units nor a FLOP roof: int32's stays the integer roof.
    assert roofs_mod.integer_roof(doc, "int8") is None and roofs_mod.integer_roof(doc, "int32").value == 19500.0
    assert [r.precision for r in roofs_mod.compute_roofs(doc)] == ["fp64", "fp16"]
    assert roofs_mod.tensor_roof(doc, "fp16").unit == "GFLOP/s"


def test_ert_show_gives_the_int8_tensor_roof_its_unit(tmp_path):
    lines = show_lines(tmp_path, int8_doc())
    start = lines.index("Tensor-core compute (warp-level MMA; a multiply-add is 2 FLOPs; int8: 2 integer ops, "
                        "GIOP/s)")
    assert lines[start + 1].split() == ["precision", "input", "accumulate", "shape", "rate", "unit", "spread",
                                        "ops/MMA", "noisy"]
    rows = {line.split()[0]: line.split() for line in lines[start + 2:start + 6]}
    assert rows["int8"][:8] == ["int8", "s8", "s32", "m16n8k32", "600000", "GIOP/s", "1.0%", "8192"]
    assert rows["fp16"][4:6] == ["290000", "GFLOP/s"]
    integer = lines[lines.index("Integer compute (wrapping; a multiply and an add are 2 ops, an add 1)"):]
    assert not any("600000" in line for line in integer)  # the int8 tensor roof is not a vector integer roof


def test_plot_and_export_keep_int8_in_giops(tmp_path):
    doc = int8_doc()
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps(doc))
    out = tmp_path / "roofline.svg"
    proc = run_cmd("ert", "plot", ceilings, "-o", out)
    assert proc.returncode == 0, proc.stderr
    svg = out.read_text()
    for text in ("tensor cores (GFLOP/s; int8 GIOP/s)",
                 "INT8 tensor (mma.sync m16n8k32, s32 accumulate) 600,000 GIOP/s",
                 "FP16 tensor (m16n8k16, f32 accumulate) 290,000 GFLOP/s"):
        assert text in svg, text
    assert "INT8 tensor (mma.sync m16n8k32, s32 accumulate) 600,000 GFLOP/s" not in svg
    # ERT's roofline.json: no FLOP row for it; INTEGER_GIOPS "INT8 Tensor", its shape in TENSOR; read back as is.
    out = tmp_path / "roofline.json"
    proc = run_cmd("ert", "export", ceilings, "--format", "ert", "-o", out)
    assert proc.returncode == 0, proc.stderr
    ert = json.loads(out.read_text())["empirical"]["gflops"]
    assert not any("INT8" in row[0] for row in ert["data"])
    assert ert["metadata"]["INTEGER_GIOPS"] == {"INT32": 19500.0, "INT8 Tensor": 600000.0}
    assert ert["metadata"]["TENSOR"]["INT8 Tensor"] == {"unit": "GIOP/s", "mma_shape": "m16n8k32", "input_type": "s8",
                                                         "accumulate": "s32", "flops_per_mma": 8192}
    from ert.interop.ert_results import load_any_ceilings

    back = roofs_mod.tensor_roof(load_any_ceilings(out), "int8")
    assert (back.unit, back.value, back.entry["accumulate"]) == ("GIOP/s", 600000.0, "s32")
    csv_text = run_cmd("ert", "export", ceilings, "--format", "csv").stdout
    assert 'compute,"INT8 tensor (mma.sync m16n8k32, s32 accumulate)",,int8,,true,600000.0,GIOP/s' in csv_text
