"""kernels/ert_cuda.cu compiles with the machine's nvcc to PTX for every variant the sweep can ask for, and the PTX does the counted work."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import background
import pytest

from ert.backends import cuda_device
from ert.backends import cuda_host as host
from ert.hardware import nvidia
from ert.spec import KernelSpec

KERNEL = Path(__file__).resolve().parents[1] / "kernels" / host.KERNEL_FILE
ARCHS = ("sm_75", "sm_80", "sm_90", "sm_100")
NVCC = shutil.which("nvcc")
pytestmark = [pytest.mark.nvcc, pytest.mark.slow,
              pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA 13) is not on PATH: cannot compile the CUDA kernels")]

# PTX type suffix of each precision's arithmetic.
PTX_TYPE = {"fp64": "f64", "fp32": "f32", "fp16": "f16x2"}


def all_specs() -> list[KernelSpec]:
    """Every KernelSpec a config can produce: fp64/fp32/fp16 x FLOPs 1..1024 x FMA on/off x rw, plus ro."""
    specs = []
    for precision in ("fp64", "fp32", "fp16"):
        specs.append(KernelSpec(precision, 1, False, "rw"))
        for k in range(1, 11):
            for fma in (True, False):
                specs.append(KernelSpec(precision, 2 ** k, fma, "rw"))
        specs.append(KernelSpec(precision, 1, False, "ro"))
    return specs


# Compiled with -D on the command line, as CuPy compiles them.
CMDLINE = [KernelSpec("fp16", 1024, False, "rw"), KernelSpec("fp32", 1, False, "ro"), KernelSpec("fp64", 8, True, "rw")]

# The FP16 path without cuda_fp16.h (NVRTC without built-in headers): its extremes.
FALLBACK = [KernelSpec("fp16", 1, False, "rw"), KernelSpec("fp16", 2, True, "rw"), KernelSpec("fp16", 2, False, "rw"),
            KernelSpec("fp16", 1024, True, "rw"), KernelSpec("fp16", 1024, False, "rw"), KernelSpec("fp16", 1, False, "ro")]


def _nvcc(args: tuple[str, ...], source: Path, out: Path) -> tuple[int, str, str]:
    proc = subprocess.run([NVCC, "-ptx", "-std=c++17", *args, str(source), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    text = out.read_text() if proc.returncode == 0 else ""
    return proc.returncode, text, proc.stderr


def _batch_source(specs: list[KernelSpec], *, fp16_header: bool) -> str:
    """One translation unit holding every variant, each exactly as its -D defines would build it.

    nvcc's fixed cost (~0.3 s of CPU per call) dwarfs a variant's own
    compile, so the 66 variants x 4 architectures are compiled as 4 batches;
    the -D command-line path CuPy uses is compiled separately below.
    """
    lines = []
    if fp16_header:
        lines.append("#include <cuda_fp16.h>  // before the namespaces: its include guard keeps it out of them")
    else:
        lines.append("#define ERT_NO_FP16_HEADER 1")
    for i, spec in enumerate(specs):
        lines.append("#undef ERT_PRECISION\n#undef ERT_FLOPS\n#undef ERT_FMA\n#undef ERT_RO\n#undef ERT_NAME_SUFFIX\n"
                     "#undef ERT_LANES")
        lines += [f"#define {d[2:].replace('=', ' ')}" for d in host.compile_defines(spec)]
        lines.append(f"#define ERT_NAME_SUFFIX _v{i}")
        lines.append(f"namespace v{i} {{\n#include \"{KERNEL}\"\n}}")
    return "\n".join(lines) + "\n"


@background.job("cuda_kernels.ptx", fixture="ptx")
def _compile_ptx():
    """PTX text by (batch, arch): every variant per arch in one file, in parallel over the cores."""
    if NVCC is None:
        return None
    jobs = {}
    for arch in ARCHS:
        jobs[("all", arch)] = (f"-arch={arch}",), _batch_source(all_specs(), fp16_header=True)
        # The -D path CuPy takes (defines on the command line), with no defines and with a few.
        jobs[("defaults", arch)] = (f"-arch={arch}",), None
    jobs[("noheader", "sm_75")] = ("-arch=sm_75",), _batch_source(FALLBACK, fp16_header=False)
    for spec in CMDLINE:
        jobs[(spec.key, "sm_90")] = ("-arch=sm_90", *host.compile_defines(spec)), None
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {}
        for i, (key, (args, text)) in enumerate(jobs.items()):
            source = KERNEL
            if text is not None:
                source = Path(tmp) / f"batch{i}.cu"
                source.write_text(text)
            futures[key] = pool.submit(_nvcc, args, source, Path(tmp) / f"{i}.ptx")
        return {key: f.result() for key, f in futures.items()}


@pytest.fixture(scope="module")
def ptx():
    """PTX text by (batch, arch), compiled in the background (tests/background.py)."""
    return background.result("cuda_kernels.ptx")


def _entry(text: str, name: str) -> str:
    """The PTX of one kernel entry (up to the next entry)."""
    start = text.index(f".entry {name}(")
    following = text.find(".entry ", start + 1)
    return text[start:following if following > 0 else len(text)]


def _count(body: str, op: str) -> int:
    return len(re.findall(rf"\b{re.escape(op)}\s", body))


def _check_variant(spec: KernelSpec, text: str, suffix: str = "") -> None:
    assert f".entry ert_init{suffix}(" in text
    kind = PTX_TYPE[spec.precision]
    body = _entry(text, host.kernel_name(spec) + suffix)
    assert _count(body, f"fma.rn.{kind}") + _count(body, f"mul.rn.{kind}") + _count(body, f"add.rn.{kind}") \
        or spec.access == "ro", body
    if spec.access == "ro":
        assert "ld.global" in body and "st.global.f64" in body  # loads, and the sum's store
        assert _count(body, f"fma.rn.{kind}") == 0 and _count(body, f"mul.rn.{kind}") == 0
        return
    assert "ld.global" in body and "st.global" in body
    k = spec.fma_ops_per_element
    fma, mul, add = (_count(body, f"{op}.rn.{kind}") for op in ("fma", "mul", "add"))
    if spec.flops_per_element == 1:
        assert (fma, mul) == (0, 0) and add >= 1
    elif spec.fma:
        # K fused multiply-adds per unit; the element loop may be unrolled, never the work dropped.
        assert mul == 0 and add == 0 and fma >= k and fma % k == 0, (fma, mul, add)
    else:
        # Never fused: as many separately rounded multiplies and adds as multiply-adds asked for.
        assert fma == 0 and mul >= k and mul % k == 0 and add == mul, (fma, mul, add)


def cupy_appended_options() -> list[str]:
    """The options CuPy's RawModule appends to every NVRTC compile, read from CuPy's own compiler source."""
    cupy_compiler = pytest.importorskip("cupy.cuda.compiler", reason="CuPy is not installed: its options are unknown")
    source = inspect.getsource(cupy_compiler._compile_with_cache_cuda)
    # Those appended unconditionally (four spaces in); the debug and LTO ones sit under an if.
    appended = re.findall(r"^    options \+= \('(-[^']+)',\)", source, re.M)
    assert "-ftz=true" in appended, appended  # CuPy 13 and 14 both do
    return appended


def test_the_options_cupy_appends_are_read_from_cupy():
    assert cupy_appended_options() == ["-ftz=true"]


def _ptxas_registers(arch: str, max_threads_per_sm: int) -> dict[str, tuple[int, int]]:
    """{kernel: (registers, spill bytes)} from ptxas -v for every variant, built as the host builds it for a GPU."""
    lines = ["#include <cuda_fp16.h>"]
    for i, spec in enumerate(all_specs()):
        lines.append("#undef ERT_PRECISION\n#undef ERT_FLOPS\n#undef ERT_FMA\n#undef ERT_RO\n#undef ERT_NAME_SUFFIX\n"
                     "#undef ERT_LANES")
        lines += [f"#define {d[2:].replace('=', ' ')}" for d in host.compile_defines(spec)]
        lines.append(f"#define ERT_NAME_SUFFIX _v{i}")
        lines.append(f"namespace v{i} {{\n#include \"{KERNEL}\"\n}}")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "all.cu"
        source.write_text("\n".join(lines) + "\n")
        # The options CuPy compiles with for such a GPU, beside the -D defines: the backend's and the ones
        # CuPy appends itself (-ftz=true, with which FP32 read+write spilled 8 bytes at 2 and 4 FLOPs).
        options = [o for o in host.compile_options(all_specs()[0], max_threads_per_sm=max_threads_per_sm)
                   if not o.startswith("-D")] + [o.replace("--std=", "-std=") for o in cuda_device.COMPILE_OPTIONS]
        options += cupy_appended_options()
        proc = subprocess.run([NVCC, "-cubin", "-std=c++17", f"-arch={arch}", *options, "-Xptxas", "-v", str(source),
                               "-o", str(Path(tmp) / "all.cubin")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out, name, spill = {}, None, 0
    for line in proc.stderr.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            name = m.group(1)
        elif m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line):
            spill = int(m.group(1)) + int(m.group(2))
        elif (m := re.search(r"Used (\d+) registers", line)) and name:
            out[name] = (int(m.group(1)), spill)
    return out


FULL_SM = {"sm_90": 2048, "sm_86": 1536, "sm_75": 1024}


@background.job("cuda_kernels.registers", fixture="registers")
def _compile_registers() -> dict[str, dict[str, tuple[int, int]]] | None:
    if NVCC is None:
        return None
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {arch: pool.submit(_ptxas_registers, arch, threads) for arch, threads in FULL_SM.items()}
        return {arch: future.result() for arch, future in futures.items()}


@pytest.fixture(scope="module")
def registers() -> dict[str, dict[str, tuple[int, int]]]:
    """{arch: ptxas's registers and spills per kernel}: the three compiles side by side, one per core (in the
    background: tests/background.py)."""
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    return background.result("cuda_kernels.registers")


@pytest.mark.parametrize("arch, threads_per_sm", FULL_SM.items())
def test_every_kernel_leaves_registers_for_a_full_sm(registers, arch, threads_per_sm):
    """ptxas's register count lets a full SM of threads be resident (one wave really is one wave).

    Without the register cap the FLOPs-1 read+write and read-only kernels
    took 40 registers on sm_90 (1600 threads per SM of 2048) and 44 on sm_86.
    """
    used = registers[arch]
    assert len(used) == 4 * len(all_specs())  # the kernel, ert_init, ert_check, ert_spin of every variant
    for name, (registers, spill) in used.items():
        assert registers * threads_per_sm <= nvidia.REGISTERS_PER_SM, (name, registers)
        assert spill == 0, (name, spill)


def test_check_and_warm_up_kernels(ptx):
    text = ptx[("all", "sm_90")][1]
    for index, spec in enumerate(all_specs()):
        check = _entry(text, f"ert_check_v{index}")
        assert "ld.global" in check and "atom.global" in check  # count and first bad element, on the device
        spin = _entry(text, f"ert_spin_v{index}")
        assert "%globaltimer" in spin  # a busy wait of known length in nanoseconds, whatever the clock


def test_every_batch_compiles(ptx):
    for key, (rc, text, err) in ptx.items():
        assert rc == 0, f"{key}: {err}"
        assert f".target {key[1]}" in text


@pytest.mark.parametrize("index", range(len(all_specs())), ids=[s.key for s in all_specs()])
def test_every_variant_does_its_flops_on_every_arch(ptx, index):
    spec = all_specs()[index]
    for arch in ARCHS:
        _check_variant(spec, ptx[("all", arch)][1], f"_v{index}")


@pytest.mark.parametrize("index", range(len(FALLBACK)), ids=[s.key for s in FALLBACK])
def test_fp16_without_header_emits_the_same_instructions(ptx, index):
    _check_variant(FALLBACK[index], ptx[("noheader", "sm_75")][1], f"_v{index}")


@pytest.mark.parametrize("spec", CMDLINE, ids=lambda s: s.key)
def test_command_line_defines_build_the_same_kernel(ptx, spec):
    _check_variant(spec, ptx[(spec.key, "sm_90")][1])


def test_source_compiles_with_no_defines(ptx):
    # Defaults: FP64, 2 FLOPs (one fused multiply-add), read+write, unsuffixed names.
    for arch in ARCHS:
        rc, text, err = ptx[("defaults", arch)]
        assert rc == 0, err
        assert _count(_entry(text, "ert_rw"), "fma.rn.f64") >= 1


@pytest.mark.parametrize("defines", [("-DERT_PRECISION=8",), ("-DERT_FLOPS=3",), ("-DERT_FLOPS=2048",)])
def test_bad_defines_are_refused(tmp_path, defines):
    rc, _, err = _nvcc(("-arch=sm_80", *defines), KERNEL, tmp_path / "x.ptx")
    assert rc != 0 and "error" in err
