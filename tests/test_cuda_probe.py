"""probe() of the cuda backend on stand-ins for CuPy: missing CUDA headers or NVRTC make it unavailable with what to
install; the errors are CuPy's own (CompileException with NVRTC's log, cuda.pathfinder's library error)."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest

from ert.backends import cuda as cuda_mod
from ert.backends import cuda_device
from ert.backends import cuda_host as host

compiler = pytest.importorskip("cupy.cuda.compiler")


def _nvrtc_log(header: str) -> compiler.CompileException:
    """The exception CuPy raises when NVRTC cannot open a header (its log, as NVRTC writes it)."""
    log = (f'/tmp/tmpab12/kern.cu(4): catastrophic error: cannot open source file "{header}"\n'
           f'  #include "{header}"\n           ^\n\n1 catastrophic error detected in the compilation of '
           f'"/tmp/tmpab12/kern.cu".\nCompilation terminated.\n')
    return compiler.CompileException(log, cuda_mod.PROBE_SOURCE, "kern.cu", ("--std=c++17",))


def _missing_nvrtc() -> Exception:
    """The error this machine's CuPy gives when it looks for libnvrtc (none here), or a copy of its text."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - the real error where NVRTC is absent
        if "nvrtc" in str(exc).lower():
            return exc
    return RuntimeError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12": No such file')


def _cupy(compile_error=None, devices=1):
    compiled = []

    class RawModule:
        def __init__(self, code, options):
            self.code, self.options = code, options

        def compile(self):
            compiled.append((self.code, self.options))
            if compile_error is not None:
                raise compile_error

    runtime = SimpleNamespace(runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000,
                              getDeviceCount=lambda: devices)
    module = ModuleType("cupy")  # a module, as the real one (probe keeps its compile check per module)
    module.__version__, module.cuda, module.RawModule = "14.2.0", SimpleNamespace(runtime=runtime), RawModule
    return module, compiled


@pytest.mark.parametrize("header", ["cuda_fp16.h", "vector_types.h", "cuda_runtime.h"])
def test_missing_cuda_headers_make_the_backend_unavailable_with_the_install_hint(monkeypatch, header):
    fake, compiled = _cupy(_nvrtc_log(header))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    ok, reason, detail = cuda_mod.probe()
    assert not ok and detail["devices"] == 1
    assert f"cannot open the CUDA header '{header}'" in reason
    assert "pip install 'cupy-cuda13x[ctk]'" in reason and "CUDA_PATH" in reason
    # It compiled what the kernels include, with their options, once for this module however often asked.
    assert len(compiled) == 1 and "#include <cuda_fp16.h>" in compiled[0][0]
    assert compiled[0][1] == cuda_device.COMPILE_OPTIONS
    cuda_mod.probe()
    assert len(compiled) == 1


def test_missing_nvrtc_gets_the_install_hint_too(monkeypatch):
    fake, _ = _cupy(_missing_nvrtc())
    monkeypatch.setitem(sys.modules, "cupy", fake)
    ok, reason, _ = cuda_mod.probe()
    assert not ok and "cannot load NVRTC" in reason and "cupy-cuda13x[ctk]" in reason


def test_a_compiling_setup_or_another_compile_error_keeps_the_backend(monkeypatch):
    fake, compiled = _cupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert cuda_mod.probe() == (True, "", {"cupy": "14.2.0", "cuda_runtime": "13.0", "devices": 1,
                                           "accelerators": 1, "driver": "13.0"})
    other = compiler.CompileException("kern.cu(5): error: identifier \"y\" is undefined", "", "kern.cu", ())
    fake, _ = _cupy(other)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    ok, reason, detail = cuda_mod.probe()
    assert ok and reason == "" and 'identifier "y" is undefined' in detail["compile_check"]
    # Without a GPU nothing is compiled.
    fake, compiled = _cupy(_nvrtc_log("cuda_fp16.h"), devices=0)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert cuda_mod.probe()[:2] == (False, "the CUDA driver reports no GPU") and compiled == []


def test_the_kernels_compile_error_carries_the_hint():
    fake, _ = _cupy(_nvrtc_log("vector_types.h"))
    device = object.__new__(cuda_device.CupyDevice)  # no GPU: only the compile path
    device._cp, device.index = fake, 0
    with pytest.raises(RuntimeError, match=r"ert_cuda\.cu: NVRTC cannot open the CUDA header 'vector_types.h'"):
        device._module(host.KERNEL_FILE, ())
    plain = compiler.CompileException("kern.cu(5): error: expected a ';'", "", "kern.cu", ())
    device._cp = _cupy(plain)[0]
    with pytest.raises(compiler.CompileException):
        device._module(host.KERNEL_FILE, ("-DX",))
    assert cuda_device.compile_hint(ValueError("unrelated")) is None
