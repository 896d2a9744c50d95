"""The CUDA integer kernels (int32/int64 multiply-add on IMAD, add-only on IADD3): nvcc's PTX and SASS, the
host plumbing, the exact replay check on an emulated GPU, and the rated integer values."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import background
import pytest
from conftest import sass_by_function

from ert.backends import cuda as cuda_mod
from ert.backends import cuda_host as host
from ert.hardware import nvidia
from ert.backends.cuda_tensor import sass_tools
from ert.backends.check import A_INT, C_INT, replay_rw_int, replay_rw_int_stepwise
from ert.config.schema import RunConfig
from ert.measure.precisions import supported_precisions
from ert.config.schema import from_dict
from ert.spec import KernelSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cuda_host import A100, A100_ATTRIBUTES, H100, V100, EmulatedGpu  # noqa: E402

KERNEL = Path(__file__).resolve().parents[1] / "kernels" / host.KERNEL_FILE
NVCC = shutil.which("nvcc")
# cuobjdump (+ nvdisasm) for the SASS checks, found as the backend finds them: on PATH, or the wheels.
CUOBJDUMP, NVDISASM_DIR = sass_tools()
ARCHS = ("sm_75", "sm_80", "sm_90", "sm_100")


def int_specs() -> list[KernelSpec]:
    """Every integer KernelSpec a config can produce on CUDA: int32/int64 x (one add, 2..1024 madd, 2..1024 add)."""
    specs = []
    for precision in ("int32", "int64"):
        specs.append(KernelSpec(precision, 1, False))
        for k in range(1, 11):
            specs.append(KernelSpec(precision, 2 ** k, False))
            specs.append(KernelSpec(precision, 2 ** k, False, op="add"))
    return specs


UNDEF = "\n".join(f"#undef {m}" for m in ("ERT_PRECISION", "ERT_FLOPS", "ERT_FMA", "ERT_RO", "ERT_INT",
                                          "ERT_ADD_OPS", "ERT_NAME_SUFFIX", "ERT_LANES"))


def _batch(specs: list[KernelSpec]) -> str:
    """One translation unit with every variant, each built from exactly its -D defines (as CuPy gets them)."""
    lines = ["#include <cuda_fp16.h>  // before the namespaces: its include guard keeps it out of them"]
    for i, spec in enumerate(specs):
        lines.append(UNDEF)
        lines += [f"#define {d[2:].replace('=', ' ')}" for d in host.compile_defines(spec)]
        lines += [f"#define ERT_NAME_SUFFIX _v{i}", f"namespace v{i} {{\n#include \"{KERNEL}\"\n}}"]
    return "\n".join(lines) + "\n"


def _nvcc(args, source: Path, out: Path) -> tuple[int, str]:
    proc = subprocess.run([NVCC, "-std=c++17", *args, str(source), "-o", str(out)], capture_output=True, text=True,
                          timeout=600)
    return proc.returncode, proc.stderr


@background.job("cuda_int.ptx", fixture="ptx")
def _compile_ptx():
    """PTX of every integer variant per architecture (one batch each, in parallel), and a -D command-line build."""
    if NVCC is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "int.cu"
        batch.write_text(_batch(int_specs()))
        jobs = {arch: (("-ptx", f"-arch={arch}"), batch) for arch in ARCHS}
        spec = KernelSpec("int64", 64, False, op="add")
        jobs["cmdline"] = (("-ptx", "-arch=sm_90", *host.compile_defines(spec)), KERNEL)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            futures = {k: pool.submit(_nvcc, args, src, Path(tmp) / f"{k}.ptx") for k, (args, src) in jobs.items()}
            out = {}
            for key, future in futures.items():
                rc, err = future.result()
                assert rc == 0, f"{key}: {err[-2000:]}"
                out[key] = (Path(tmp) / f"{key}.ptx").read_text()
    return out


@pytest.fixture(scope="module")
def ptx():
    """The PTX, compiled in the background (tests/background.py)."""
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    return background.result("cuda_int.ptx")


def _entry(text: str, name: str) -> str:
    start = text.index(f".entry {name}(")
    following = text.find(".entry ", start + 1)
    return text[start:following if following > 0 else len(text)]


def _inline(body: str, op: str) -> int:
    """How many ``op`` instructions sit in the entry's inline-asm blocks (not the index arithmetic)."""
    blocks = re.findall(r"// begin inline asm(.*?)// end inline asm", body, re.S)
    return sum(len(re.findall(rf"\b{re.escape(op)}\s", b)) for b in blocks)


def _count(body: str, op: str) -> int:
    return len(re.findall(rf"\b{re.escape(op)}\s", body))


def check_ptx(spec: KernelSpec, body: str) -> None:
    """The PTX does the counted work: K madds (mad.lo) or K dependent adds (add.s32/s64 in inline asm), K unfolded."""
    bits = host.PRECISION_BITS[spec.precision]
    # 64-bit madds are inline mad.lo.s64 (the index arithmetic has its own mad.lo.s64 / add.s64).
    mad = (lambda b: _count(b, "mad.lo.s32")) if bits == 32 else (lambda b: _inline(b, "mad.lo.s64"))
    assert "ld.global" in body and "st.global" in body
    assert not re.search(r"\b(fma|mul|add)\.rn\.", body), "integer kernel does floating-point arithmetic"
    if spec.add_ops_per_element:
        k = spec.add_ops_per_element
        adds = _inline(body, f"add.s{bits}")
        assert adds >= k and adds % k == 0, (spec.key, adds)  # K per element; never folded into b + K c
        assert mad(body) == 0
    elif spec.flops_per_element == 1:
        assert _count(body, f"add.s{bits}") >= 1 and mad(body) == 0
    else:
        k = spec.fma_ops_per_element
        mads = mad(body)
        assert mads >= k and mads % k == 0, (spec.key, mads)
        if bits == 32:
            assert _count(body, "add.s32") == 0  # every add is inside a mad


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA 13) is not on PATH: cannot compile the CUDA kernels")
def test_every_integer_variant_compiles_and_does_its_operations_on_every_arch(ptx):
    for arch in ARCHS:
        text = ptx[arch]
        assert f".target {arch}" in text
        for i, spec in enumerate(int_specs()):
            check_ptx(spec, _entry(text, f"ert_rw_v{i}"))
            check = _entry(text, f"ert_check_v{i}")
            bits = host.PRECISION_BITS[spec.precision]
            assert "atom.global" in check and re.search(rf"setp\.(eq|ne)\.[su]{bits}", check), check
            assert ".f64" not in check.split("{", 1)[1]  # exact words compared on the device, no float metric
    check_ptx(KernelSpec("int64", 64, False, op="add"), _entry(ptx["cmdline"], "ert_rw"))


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA 13) is not on PATH: cannot compile the CUDA kernels")
@pytest.mark.parametrize("defines", [("-DERT_INT=1", "-DERT_PRECISION=16"), ("-DERT_INT=1", "-DERT_RO=1"),
                                     ("-DERT_INT=1", "-DERT_FMA=1", "-DERT_FLOPS=8"),
                                     ("-DERT_ADD_OPS=8", "-DERT_FLOPS=8"),
                                     ("-DERT_INT=1", "-DERT_ADD_OPS=4", "-DERT_FLOPS=8")])
def test_bad_integer_defines_are_refused(tmp_path, defines):
    rc, err = _nvcc(("-ptx", "-arch=sm_80", *defines), KERNEL, tmp_path / "x.ptx")
    assert rc != 0 and "error" in err


# ----------------------------------------------------------------------------- SASS: what the rated values assume
SASS_SPECS = [KernelSpec("int32", 64, False), KernelSpec("int32", 64, False, op="add"),
              KernelSpec("int64", 64, False, op="add"), KernelSpec("int64", 16, False)]


def _copies(count: int, per_element: int) -> bool:
    """Whether ``count`` instructions are a whole number of per-element chains of ``per_element`` (ptxas unrolls
    the element loop; where it peels a chain's first or last instruction into another form, within 5 %)."""
    n = round(count / per_element)
    return n >= 1 and abs(count - n * per_element) <= 0.05 * n * per_element


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None or NVDISASM_DIR is None,
                    reason="needs nvcc and cuobjdump + nvdisasm (pip install nvidia-cuda-cuobjdump "
                           "nvidia-cuda-nvdisasm) to read the SASS")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_sass_matches_the_instructions_the_rated_values_count(tmp_path, arch):
    """int32 madd: K IMADs of one a and c; int32 add: K/2 three-input IADD3 (x + c + c); int64 add: K/2
    IADD3 + IADD3.X pairs; int64 madd: several instructions each (IMAD.WIDE.U32 among them): no rated value."""
    source = tmp_path / "sass.cu"
    source.write_text(_batch(SASS_SPECS))
    options = [o for o in host.compile_options(SASS_SPECS[0], max_threads_per_sm=2048) if not o.startswith("-D")]
    rc, err = _nvcc(("-cubin", f"-arch={arch}", *options), source, tmp_path / "sass.cubin")
    assert rc == 0, err[-2000:]
    env = {**os.environ, "PATH": NVDISASM_DIR + os.pathsep + os.environ.get("PATH", "")}
    listings = sass_by_function(CUOBJDUMP, tmp_path / "sass.cubin", env)
    for i, spec in enumerate(SASS_SPECS):
        sass = listings[f"ert_rw_v{i}"]
        k = spec.add_ops_per_element or spec.fma_ops_per_element
        if spec.key == "int32-madd-rw-f64":
            # IMAD Rd, Rb, a, c: the most common (a, c) operand pair is the chain's.
            pairs = [p for p in re.findall(r"\bIMAD (R\d+), (R\d+), ([^,;]+), ([^,;]+) ;", sass) if p[3] != "RZ"]
            top = max((sum(1 for p in pairs if p[2:] == q[2:]) for q in pairs), default=0)
            assert _copies(top, k), (arch, top)
            ops = nvidia.INT_OPS_PER_INSTRUCTION[("int32", "madd")]
            assert ops == 2  # one IMAD is a multiply and an add
        elif spec.key == "int32-add-rw-f64":
            packed = re.findall(r"\bIADD3 R\d+, (?:PT, PT, )?(R\d+), R\d+, \1 ;", sass)
            assert _copies(len(packed), k // 2), (arch, len(packed))
            assert nvidia.INT_OPS_PER_INSTRUCTION[("int32", "add")] == 2
        elif spec.key == "int64-add-rw-f64":
            lo = re.findall(r"\bIADD3 R\d+, P\d, P\d, (R\d+), R\d+, \1 ;", sass)
            hi = re.findall(r"\bIADD3\.X R\d+, (?:PT, PT, )?(R\d+), R\d+, \1, P\d, P\d ;", sass)
            assert _copies(len(lo), k // 2) and _copies(len(hi), k // 2), (arch, len(lo), len(hi))
            assert nvidia.INT_OPS_PER_INSTRUCTION[("int64", "add")] == 1  # 2 adds in 2 instructions
        else:
            assert "IMAD.WIDE.U32" in sass  # the emulated 64-bit multiply
            assert ("int64", "madd") not in nvidia.INT_OPS_PER_INSTRUCTION


# ----------------------------------------------------------------------------- host logic
class EmulatedIntGpu(EmulatedGpu):
    """EmulatedGpu with the integer kernels' arithmetic as kernels/ert_cuda.cu writes it: unsigned, wrapping."""

    def check_rw(self, function, data, *, n_units, expected16, tolerance, blocks, threads):
        spec = function[1]
        if spec.precision not in ("int32", "int64"):
            return super().check_rw(function, data, n_units=n_units, expected16=expected16, tolerance=tolerance,
                                    blocks=blocks, threads=threads)
        expected16 = np.asarray(expected16)
        assert expected16.dtype.kind == "i"  # exact values, never floats
        values = data[:n_units * spec.itemsize].view(host.HOST_DTYPE[spec.precision])
        bad = values != expected16[np.arange(n_units) % 16]
        return int(bad.sum()), (int(np.argmax(bad)) if bad.any() else int(np.iinfo(np.uint64).max))

    def launch(self, function, *, blocks, threads, args):
        kind, spec = function
        if spec.precision not in ("int32", "int64") or kind not in ("init", "rw"):
            return super().launch(function, blocks=blocks, threads=threads, args=args)
        udt = np.uint32 if spec.precision == "int32" else np.uint64
        data, n_units = args[0], int(args[1])
        values = data[:n_units * spec.itemsize].view(udt)
        if kind == "init":
            values[:] = (3 + 1000003 * (np.arange(n_units) % 16)).astype(udt)
            return
        trials, offset = int(args[2]), int(args[3])
        assert isinstance(args[4], np.int64) and isinstance(args[5], np.int64)  # long long a, c
        a, c = udt(int(args[4]) & 0xFFFFFFFFFFFFFFFF), udt(int(args[5]) & 0xFFFFFFFFFFFFFFFF)
        self.launched.append({"kind": kind, "blocks": blocks, "threads": threads, "trials": trials})
        with np.errstate(over="ignore"):
            for t in range(trials):
                ct = c if (offset + t) % 2 == 0 else udt(0) - c
                if spec.add_ops_per_element:
                    for _ in range(spec.add_ops_per_element):
                        values[:] = values + ct
                elif spec.flops_per_element == 1:
                    values[:] = values + ct
                else:
                    for _ in range(spec.fma_ops_per_element):
                        values[:] = values * a + ct


def _backend(props=H100, **kw) -> cuda_mod.CudaBackend:
    return cuda_mod.CudaBackend(options=RunConfig().cuda, device=EmulatedIntGpu(props, **kw))


INT_KINDS = [KernelSpec("int32", 1, False), KernelSpec("int32", 8, False), KernelSpec("int32", 8, False, op="add"),
             KernelSpec("int64", 1, False), KernelSpec("int64", 16, False), KernelSpec("int64", 4, False, op="add")]


@pytest.mark.parametrize("spec", INT_KINDS, ids=lambda s: s.key)
def test_integer_points_run_and_pass_the_exact_check(spec):
    backend = _backend()
    launch = backend.launches(spec, 1000)[-1]
    backend.prepare(spec, elements_per_thread=1000, launch=launch)
    for trials in (1, 6, 40):
        backend.run(trials)
    result = backend.check()
    assert result.ok and result.detail == "every element equals the replay (exact integers)", result.detail
    assert backend._dev.bytes_read == 0  # a passing point copies nothing back
    got = backend._data[:32 * spec.itemsize].view(host.HOST_DTYPE[spec.precision])
    want = replay_rw_int_stepwise(spec, trials=48)  # 1 warm-up + 47
    assert np.array_equal(got[:16], want) and np.array_equal(got[16:], want)


@pytest.mark.parametrize("spec", [KernelSpec("int64", 8, False), KernelSpec("int32", 4, False, op="add")],
                         ids=lambda s: s.key)
def test_integer_check_catches_one_wrong_element_and_a_lost_trial(spec):
    backend = _backend()
    backend.prepare(spec, elements_per_thread=4096, launch=backend.launches(spec, 4096)[-1])
    backend.run(5)
    assert backend.check().ok
    values = backend._data.view(host.HOST_DTYPE[spec.precision])
    saved = int(values[1234])
    values[1234] = saved ^ 1  # one bit: a float64 error metric would miss it on int64
    result = backend.check()
    assert not result.ok and "1 element(s)" in result.detail and f"element 1234: {saved ^ 1} != replay {saved}" \
        in result.detail, result.detail
    values[1234] = saved
    assert backend.check().ok
    backend._trials_done += 1
    assert not backend.check().ok
    backend.corrupt_for_test()
    backend._trials_done -= 1
    assert not backend.check().ok


def test_integer_arguments_are_64_bit_integers():
    backend = _backend()
    spec = KernelSpec("int32", 2, False)
    backend.prepare(spec, elements_per_thread=256, launch=backend.launches(spec, 256)[-1])
    args = backend._args(3)
    assert args[4] == A_INT and args[5] == C_INT and all(isinstance(x, np.int64) for x in args[1:])


def test_supports_and_compile_defines():
    backend = _backend()
    for spec in INT_KINDS:
        assert backend.supports(spec)
    assert backend.supports(KernelSpec("fp32", 8, True)) and backend.supports(KernelSpec("fp16", 1, False, "ro"))
    assert not backend.supports(KernelSpec("fp64", 8, True, mix="fma+add"))
    assert not backend.supports(KernelSpec("fp32", 8, True, mix="int32+fp32"))
    assert "int32" in backend.unsupported_reason("int8") and "int8" in backend.unsupported_reason("int8")
    assert host.compile_defines(KernelSpec("int64", 16, False)) == (
        "-DERT_PRECISION=64", "-DERT_FLOPS=16", "-DERT_FMA=0", "-DERT_RO=0", "-DERT_INT=1", "-DERT_ADD_OPS=0")
    assert host.compile_defines(KernelSpec("int32", 16, False, op="add"))[-2:] == ("-DERT_INT=1", "-DERT_ADD_OPS=16")
    assert "-DERT_INT=1" not in host.compile_defines(KernelSpec("fp32", 16, True))  # FP builds unchanged
    # The precision policy keeps the integers and their add-only kernel on cuda (only mixes are dropped).
    cfg = from_dict({"backend": "cuda", "precisions": ["fp32", "int32", "int64"], "fma": "both",
                     "int_ops": ["madd", "add"], "mixes": ["fma+add"]})
    kept, note = supported_precisions(cfg, backend)
    assert kept.precisions == ["fp32", "int32", "int64"] and kept.int_ops == ["madd", "add"]
    assert "int_ops" not in (note or "") and "mixes" in note


def _int_rated(info, precision, op="madd"):
    return next(c for c in nvidia.rated_peaks(info)["compute"]
                if c["precision"] == precision and c.get("op", "madd") == op)


def test_rated_integer_values_and_their_derivation():
    # H100 SXM5: 132 SMs x 1980 MHz x 64 IMAD/cycle/SM x 2 = 33.45 TIOP/s int32 multiply-add.
    h100 = host.device_info(H100)
    madd = _int_rated(h100, "int32")
    assert madd["gflops_per_s"] == pytest.approx(132 * 1980e6 * 64 * 2 / 1e9, abs=0.1)
    assert madd["unit"] == "GIOP/s" and madd["fma"] is False and "op" not in madd
    assert madd["derivation"].startswith("132 SMs x 1980 MHz x 64 IMAD/cycle/SM x 2 int32 op(s) per instruction")
    assert "Programming Guide" in madd["derivation"]
    add32 = _int_rated(h100, "int32", "add")
    assert add32["gflops_per_s"] == pytest.approx(132 * 1980e6 * 64 * 2 / 1e9, abs=0.1) and "IADD3" in add32["derivation"]
    add64 = _int_rated(h100, "int64", "add")
    assert add64["gflops_per_s"] == pytest.approx(132 * 1980e6 * 64 / 1e9, abs=0.1)
    madd64 = _int_rated(h100, "int64")
    assert madd64["gflops_per_s"] is None and madd64["derivation"].startswith(
        "no rated value: 64-bit integer multiply is emulated")
    # V100 (80 x 1530 MHz) and A100 (108 x 1410 MHz, the CUDA 13 clock attribute) likewise.
    v100 = host.device_info(V100)
    assert _int_rated(v100, "int32")["gflops_per_s"] == pytest.approx(80 * 1530e6 * 128 / 1e9, abs=0.1)
    a100 = host.device_info(A100, attributes=A100_ATTRIBUTES)
    assert _int_rated(a100, "int64", "add")["gflops_per_s"] == pytest.approx(108 * 1410e6 * 64 / 1e9, abs=0.1)
    # An architecture not in the table, and an unknown clock: None, with why.
    blackwell = host.device_info({**H100, "major": 10, "minor": 0, "name": "NVIDIA B200"})
    assert _int_rated(blackwell, "int32")["gflops_per_s"] is None
    assert "sm_100" in _int_rated(blackwell, "int32")["derivation"]
    clockless = host.device_info({**H100, "clockRate": 0})
    assert _int_rated(clockless, "int32", "add")["derivation"] == "no rated value: SM clock unknown"
    # Every integer roof has exactly one rated entry, keyed as the analysis keys ceilings.
    from ert.analysis.rated import compute_key

    keys = [compute_key(c) for c in nvidia.rated_peaks(h100)["compute"]]
    assert len(keys) == len(set(keys))
    for spec in INT_KINDS[1:3] + INT_KINDS[4:]:
        assert compute_key(spec.to_dict()) in keys


def test_describe_lists_the_integer_rated_values():
    info = _backend().describe()
    rated = [c for c in info["rated"]["compute"] if c["precision"] in ("int32", "int64")]
    assert len(rated) == 4 and all(c["unit"] == "GIOP/s" for c in rated)
    assert "integers exactly" in info["check"]


def test_replay_for_the_cuda_layout_equals_the_stepwise_reference():
    for spec in INT_KINDS:
        for trials in (0, 1, 2, 7, 48):
            assert np.array_equal(replay_rw_int(spec, trials=trials), replay_rw_int_stepwise(spec, trials=trials))


# ----------------------------------------------------------------------------- on a GPU (never run on one yet)
_GPU_OK, _GPU_REASON, _ = cuda_mod.probe()


@pytest.mark.gpu
@pytest.mark.skipif(not _GPU_OK, reason=f"needs an NVIDIA GPU; the cuda backend says: {_GPU_REASON}")
@pytest.mark.parametrize("spec", INT_KINDS, ids=lambda s: s.key)
def test_integer_kernels_run_on_the_gpu_and_pass_their_exact_check(spec):
    import cupy

    backend = cuda_mod.create()
    try:
        elements = 1 << 22
        for launch in backend.launches(spec, elements)[:2]:
            backend.prepare(spec, elements_per_thread=elements, launch=launch)
            assert backend.run(3) + backend.run(4) > 0
            result = backend.check()
            assert result.ok, result.detail
            assert backend._kernel.num_regs <= host.max_registers(backend._dev.info.max_threads_per_sm)
            assert backend.point_info()["occupancy"]["waves"] == 1, backend.point_info()
        values = backend._data[:64].view(host.HOST_DTYPE[spec.precision].__name__)
        values[3:5] += 1  # two elements off by one: caught exactly, the first named
        # That kernel ran on CuPy's current (legacy default) stream, which nothing orders with the backend's
        # non-blocking kernel stream: wait for it, or the check kernel could read the buffer before it.
        cupy.cuda.runtime.deviceSynchronize()
        result = backend.check()
        assert not result.ok and "2 element(s)" in result.detail and "the first, element 3:" in result.detail, \
            result.detail
    finally:
        backend.close()


@pytest.mark.gpu
@pytest.mark.skipif(not _GPU_OK, reason=f"needs an NVIDIA GPU; the cuda backend says: {_GPU_REASON}")
def test_integer_sweep_reaches_its_rated_values(tmp_path):
    """configs/integer-gpu.yaml through ert-run: every integer roof checked, and >= 0.85 x rated where rated."""
    import json

    from conftest import CONFIGS, run_cmd

    out = tmp_path / "run"
    proc = run_cmd("ert-run", CONFIGS / "integer-gpu.yaml", "--out", out, "-q", timeout=1800)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "ceilings.json").read_text())
    assert doc["metadata"]["points"]["invalid"] == 0, doc["warnings"]
    compute = {(c["precision"], c.get("op", "madd")): c for c in doc["ceilings"]["compute"]}
    assert set(compute) == {(p, op) for p in ("int32", "int64") for op in ("madd", "add")}, sorted(compute)
    for (precision, op), c in compute.items():
        assert c["unit"] == "GIOP/s" and c["gflops_per_s"] > 0 and c["evidence"], c
        rated = c["rated"]
        if rated["gflops_per_s"]:
            assert 0.85 <= rated["ratio"] <= 1.05, (precision, op, c["gflops_per_s"], rated)
        else:
            assert rated["derivation"].startswith("no rated value"), rated
    shown = run_cmd("ert", "show", out)
    assert shown.returncode == 0 and "int32 multiply-add" in shown.stdout and "GIOP/s" in shown.stdout
