"""OpenCL backend: runs kernels/ert_opencl.cl through PyOpenCL on one device per rank, timed by profiling events."""

from __future__ import annotations

import hashlib
import math
from importlib import resources

from ert.backends import close_attr, grow_buffer, opencl_check
from ert.backends.check import A, A_INT, C, C_INT, CheckResult
from ert.backends.opencl_check import HOST_DTYPE, SUM_DTYPE
from ert.backends.opencl_devices import (EXTENSION_OF, build_program, cache_hints, device_info,
                                         fused_multiply_adds, is_pocl, no_accelerators, precisions_of, probe,
                                         select_device, type_name)
from ert.errors import ErtError
from ert.spec import KernelSpec, is_integer

__all__ = ["probe", "no_accelerators", "create", "OpenCLBackend"]

NAME = "opencl"
KERNEL_FILE = "ert_opencl.cl"
BITS = {"fp64": 64, "fp32": 32, "fp16": 16, "int32": 32, "int64": 64}
# Independent vectors per work-item.  A CPU needs latency x issue width in
# flight: a separate multiply and add is ~6 cycles deep on 2 pipes, so 12
# AVX2 registers; 6 vectors of 2 registers each leave room for the constants
# (8 would spill).  A CPU device whose native vectors are 512 bits (AVX-512:
# one register per vector, 32 registers) needs more vectors for the same
# depth: on Zen 5 with PoCL 3.1, 6 gave FP64 FMA 0.90, no-FMA 0.59 and the
# int32 add roof 0.63 of rated; 12 gave 0.97 / 0.93 / 0.99 and 16
# 0.96 / 0.97 / 0.99 (one run each, 256-512 KiB, under the measurement lock).
# GPUs hide latency with other warps and need fewer.
DEFAULT_CHAINS = {"cpu": 6, "cpu-512": 16, "other": 4}

# Built programs, keyed by a hash of source, build options, device and context (a
# program belongs to the context it was built in: another backend instance's
# context gets INVALID_CONTEXT from it); a build happens in prepare(), never in a
# timed region (PyOpenCL adds its own disk cache).
_PROGRAMS: dict[str, object] = {}


def kernel_source() -> str:
    """The kernel file shipped in the package (kernels/ert_opencl.cl as ert.kernels)."""
    return resources.files("ert.kernels").joinpath(KERNEL_FILE).read_text()


def usable_local_sizes(requested: list[int], kernel_max: int) -> list[int]:
    """The work-group sizes the built kernel can launch with (CL_KERNEL_WORK_GROUP_SIZE, which may be
    smaller than the device's maximum: registers, local memory)."""
    return [size for size in requested if size <= kernel_max]


def contract_warning(precision: str, fused: int) -> str:
    """The warning that flags a no-FMA ceiling whose code the driver fused anyway."""
    return (f"{precision} no-FMA ceiling is not one: the driver's code for the no-FMA kernel holds {fused} fused "
            f"multiply-add(s) despite #pragma OPENCL FP_CONTRACT OFF; read it as an FMA ceiling")


def create(*, threads: int = 1, options=None, local_rank: int = 0, local_size: int = 1) -> "OpenCLBackend":
    """``options``: the config's ``opencl`` block (ert.config.schema.OpenCLOptions; defaults when None); ``threads`` is
    ignored (one host thread per rank drives the device)."""
    return OpenCLBackend(options=options, local_rank=local_rank, local_size=local_size)


class OpenCLBackend:
    """The Backend protocol on one OpenCL device: one buffer, one kernel launch per timed region."""

    name = NAME
    threads = 1  # one host thread per rank drives the device

    def __init__(self, *, options=None, local_rank: int = 0, local_size: int = 1):
        import numpy as np
        import pyopencl as cl

        from ert.config.schema import OpenCLOptions

        self._np, self._cl = np, cl
        self.options = options if options is not None else OpenCLOptions()
        self.local_rank, self.local_size = local_rank, local_size
        self.device, self.choice = select_device(self.options, local_rank=local_rank)
        # Ranks on one host that pick the same platform:device share it (ert.measure.comm.shared_device_warnings).
        self.device_id = f"opencl:{self.choice['platform_index']}:{self.choice['device_index']}"
        # FP_CONTRACT OFF, as the driver honoured it: precision -> fused multiply-adds
        # found in a no-FMA binary (0: checked and clean), where the binary is readable.
        self.contract: dict[str, int] = {}
        self.info = device_info(self.device)
        self.kind = type_name(self.device)
        self.precisions = precisions_of(self.device)
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.contiguous = (self.options.layout == "contiguous"
                           or (self.options.layout == "auto" and self.kind == "cpu"))
        self.chains = self.options.chains or DEFAULT_CHAINS[self._chain_class()]
        self.builtin_fma = is_pocl(self.device)
        self._source = kernel_source()
        self._buf = self._sums = None
        self._spec: KernelSpec | None = None
        self._cpu_reference: dict | None = None
        self._measure_reference = None  # handed in by the measuring side (use_cpu_reference)
        # One reference per node (rank 0 of it): ranks measuring at once would slow each other.
        self._want_reference = self.options.cpu_reference and local_rank == 0
        self._links = None  # the link sweep (ert.backends.opencl_links), while links are measured

    def unsupported_reason(self, precision: str) -> str:
        """Why this device cannot run ``precision`` (the driver skips those points, or refuses the run)."""
        return f"OpenCL device {self.info['device']!r} has no {EXTENSION_OF.get(precision, precision)}"

    # -- geometry ---------------------------------------------------------------
    def _chain_class(self) -> str:
        """"cpu-512" for a CPU device with 512-bit native vectors, "cpu" for other CPUs, else "other"."""
        if self.kind != "cpu":
            return "other"
        return "cpu-512" if int(self.device.native_vector_width_float or 0) * 4 >= 64 else "cpu"

    def vector_width(self, spec: KernelSpec) -> int:
        if self.options.vector_width:
            return self.options.vector_width
        native = {"fp64": self.device.native_vector_width_double, "fp32": self.device.native_vector_width_float,
                  "fp16": self.device.native_vector_width_half, "int32": self.device.native_vector_width_int,
                  "int64": self.device.native_vector_width_long}[spec.precision]
        width = 1
        while width * 2 <= min(int(native or 1), 16):
            width *= 2
        return width

    def granule_elements(self, spec: KernelSpec) -> int:
        """A whole number of chain groups, and of the 16-value initial pattern."""
        group = self.vector_width(spec) * self.chains
        return group * 16 // math.gcd(group, 16)

    def supports(self, spec: KernelSpec) -> bool:
        if is_integer(spec.precision):  # every OpenCL device has int and long (OpenCL C 1.0); no load-only sum
            return spec.access == "rw" and not spec.mix
        return self.precisions.get(spec.precision, False) and not spec.mix

    def _default_sizes(self) -> tuple[list[int], list[int]]:
        units = int(self.info["compute_units"])
        if self.kind == "cpu":
            # One work-item per compute unit, each streaming its own block, as
            # the CPU backend's threads do; a work-group of one keeps the
            # driver's work-item loop out of the kernel's way.
            return [units], [1]
        local = min(256, int(self.info["max_work_group_size"]))
        return [units * local * 4, units * local * 16], [local]

    def launches(self, spec: KernelSpec, elements_per_thread: int) -> list[dict]:
        """Global x local sizes to try at this working set (ERT_OCL_SIZES); [] for an unsupported precision.

        A geometry whose work-items would not each get one chain group is
        skipped; if none fits, the largest global size that does is used.
        """
        if not self.supports(spec):
            return []
        need = elements_per_thread * spec.itemsize
        if need > self.info["max_alloc_bytes"]:
            raise ErtError(f"a {need} byte working set exceeds the largest buffer OpenCL device "
                           f"{self.info['device']!r} allocates ({self.info['max_alloc_bytes']} bytes)",
                           key="working_set.max_bytes")
        default_global, default_local = self._default_sizes()
        globals_ = self.options.global_sizes or default_global
        kernel_max = self.kernel_work_group_size(spec)
        locals_ = usable_local_sizes(self.options.local_sizes or default_local, kernel_max)
        if not locals_ and not self.options.local_sizes:
            locals_ = [kernel_max]  # the defaults assume 256; a kernel that allows fewer gets its own maximum
        if not locals_:
            raise ErtError(f"every local size exceeds the kernel's maximum work-group size on this device "
                           f"({kernel_max})", key="opencl.local_sizes")
        vw = self.vector_width(spec)
        groups = elements_per_thread // (vw * self.chains)
        # The interleaved load-only check needs each work-item's vectors to
        # start at the same place in the 16-value pattern: G * vw % 16 == 0.
        step = 1 if self.contiguous else 16 // math.gcd(16, vw)
        out = []
        for local in locals_:
            unit = local * step // math.gcd(local, step)
            for size in globals_:
                if size % unit == 0 and size <= groups:
                    out.append({"global": size, "local": local})
        if not out:
            local = min(locals_)
            unit = local * step // math.gcd(local, step)
            out.append({"global": max(unit, groups // unit * unit), "local": local})
        return out

    # -- the protocol -------------------------------------------------------------
    def build_options(self, spec: KernelSpec) -> list[str]:
        options = [f"-DERT_BITS={BITS[spec.precision]}", f"-DERT_VW={self.vector_width(spec)}",
                   f"-DERT_CHAINS={self.chains}", f"-DERT_FMA_OPS={spec.fma_ops_per_element}",
                   f"-DERT_FMA={int(spec.fma)}", f"-DERT_FMA_BUILTIN={int(self.builtin_fma)}",
                   f"-DERT_CONTIGUOUS={int(self.contiguous)}"]
        if is_integer(spec.precision):
            options += ["-DERT_INT=1", f"-DERT_ADD_OPS={spec.add_ops_per_element}",
                        f"-DERT_ASM_BARRIER={int(self.builtin_fma)}"]  # clang-based (PoCL)
        return options

    def kernel_work_group_size(self, spec: KernelSpec) -> int:
        """CL_KERNEL_WORK_GROUP_SIZE of the built kernel for ``spec`` (at most the device's maximum)."""
        kernel = self._cl.Kernel(self._program(spec), "ert_ro" if spec.access == "ro" else "ert_rw")
        size = kernel.get_work_group_info(self._cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device)
        return int(min(size, self.info["max_work_group_size"]))

    def _program(self, spec: KernelSpec):
        options = self.build_options(spec)
        device_id = "|".join(str(self.info[k]) for k in ("platform", "platform_version", "device", "driver_version"))
        key = hashlib.sha256("\0".join([self._source, " ".join(options), device_id]).encode()).hexdigest()
        key += f"@{self.context.int_ptr:x}"  # the cached program keeps its context alive, so the pointer is unique
        if key not in _PROGRAMS:
            # A failed build is one line naming the device and the log's first error (ErtError).
            _PROGRAMS[key] = build_program(self.context, self.device, self._source, options,
                                           what=f"{KERNEL_FILE} ({' '.join(options)})")
        if not spec.fma and spec.fma_ops_per_element and spec.precision not in self.contract \
                and not is_integer(spec.precision):
            self._check_contract(spec, _PROGRAMS[key])
        return _PROGRAMS[key]

    def _check_contract(self, spec: KernelSpec, program) -> None:
        """Read the no-FMA binary (PTX on NVIDIA, bitcode on PoCL) for fused multiply-adds."""
        try:
            binaries = program.get_info(self._cl.program_info.BINARIES)
        except Exception:  # a driver that does not hand its binary out: nothing to read
            return
        fused = fused_multiply_adds(bytes(binaries[0])) if binaries else None
        if fused is not None:
            self.contract[spec.precision] = fused

    def _buffer(self, attr: str, need: int):
        """A device buffer of at least ``need`` bytes, reused across points and grown when too small."""
        return grow_buffer(self, attr, need_bytes=need, nbytes=lambda b: b.size, release=lambda b: b.release(),
                           allocate=lambda n: self._cl.Buffer(self.context, self._cl.mem_flags.READ_WRITE, n))

    def prepare(self, spec: KernelSpec, *, elements_per_thread: int, launch: dict | None = None) -> None:
        np, cl = self._np, self._cl
        if not self.supports(spec):
            raise ValueError(f"OpenCL device {self.info['device']!r} does not run {spec.precision}")
        granule = self.granule_elements(spec)
        if elements_per_thread < granule or elements_per_thread % granule:
            raise ValueError(f"elements_per_thread must be a multiple of {granule}")
        launch = launch or self.launches(spec, elements_per_thread)[0]
        self._global, self._local = int(launch["global"]), int(launch["local"])
        if self._global % self._local:
            raise ValueError(f"global size {self._global} is not a multiple of local size {self._local}")
        self._spec, self._n, self._trials_done = spec, elements_per_thread, 0
        self._vw = self.vector_width(spec)
        self._n_vectors = elements_per_thread // self._vw
        program = self._program(spec)
        buf = self._buffer("_buf", elements_per_thread * spec.itemsize)
        init = cl.Kernel(program, "ert_init")
        init.set_args(buf, np.uint64(elements_per_thread))
        init_global = min(elements_per_thread, 1 << 16)
        cl.enqueue_nd_range_kernel(self.queue, init, (init_global,), None)
        if spec.access == "ro":
            sum_dtype = np.dtype(SUM_DTYPE[spec.precision])
            sums = self._buffer("_sums", 2 * self._global * sum_dtype.itemsize)
            cl.enqueue_copy(self.queue, sums, np.zeros(2 * self._global, dtype=sum_dtype))
            self._kernel = cl.Kernel(program, "ert_ro")
            self._kernel.set_args(buf, sums, np.uint64(self._n_vectors), np.uint64(0))
        else:
            self._kernel = cl.Kernel(program, "ert_rw")
            integer = is_integer(spec.precision)
            self._kernel.set_args(buf, np.uint64(self._n_vectors), np.uint64(0), np.uint64(0),
                                  np.int64(A_INT) if integer else np.float32(A),
                                  np.int64(C_INT) if integer else np.float32(C))
        # Zero trials: some drivers (PoCL) compile the work-group function for
        # a local size at its first launch; that, and first touch of the
        # buffer, must not fall in a timed region.
        self._launch(0).wait()

    def _launch(self, trials: int):
        self._kernel.set_arg(2 if self._spec.access == "rw" else 3, self._np.uint64(trials))
        if self._spec.access == "rw":
            self._kernel.set_arg(3, self._np.uint64(self._trials_done))
        return self._cl.enqueue_nd_range_kernel(self.queue, self._kernel, (self._global,), (self._local,))

    def run(self, trials: int) -> float:
        """Blocks until the launch is done; seconds between the event's start and end.

        All ``trials`` run inside one launch: launching once per trial would time
        the launch overhead (tens of microseconds) instead of an L1-sized pass.
        """
        event = self._launch(trials)
        event.wait()
        self._trials_done += trials
        return (event.profile.end - event.profile.start) * 1e-9

    def check(self) -> CheckResult:
        if self._spec.access == "ro":
            expected = opencl_check.expected_sums(global_size=self._global, n_vectors=self._n_vectors,
                                                  vector_width=self._vw, chains=self.chains,
                                                  contiguous=self.contiguous) * self._trials_done
            return opencl_check.check_ro(cl=self._cl, queue=self.queue, sums=self._sums, spec=self._spec,
                                         expected=expected, trials=self._trials_done)
        return opencl_check.check_rw(cl=self._cl, queue=self.queue, buf=self._buf, spec=self._spec,
                                     n_elements=self._n, trials=self._trials_done)

    def corrupt_for_test(self) -> None:
        """Test-only: damage one value that check() examines (an element, or a load-only sum)."""
        np = self._np
        if self._spec.access == "ro":
            dtype = np.dtype(SUM_DTYPE[self._spec.precision])
            bad, target, index = np.array([12345.0], dtype=dtype), self._sums, 2 * (self._global // 2)
        else:
            dtype = np.dtype(HOST_DTYPE[self._spec.precision])
            bad, target, index = np.array([3], dtype=dtype), self._buf, self._n // 2 + 5
        self._cl.enqueue_copy(self.queue, target, bad, dst_offset=index * dtype.itemsize).wait()

    def close(self) -> None:
        close_attr(self, "_links")
        for attr in ("_buf", "_sums"):
            if getattr(self, attr) is not None:
                getattr(self, attr).release()
                setattr(self, attr, None)
        self.queue.finish()

    # -- link levels (issue 15) ------------------------------------------------------
    def link_transfers(self, max_bytes: int) -> list:
        """link-h2d, link-d2h and link-bidir, variants ``copy`` and ``mapped``, with buffers for up to
        ``max_bytes`` (released by ``close``); ert.measure.transfers times them. See ert.backends.opencl_links."""
        from ert.backends import opencl_links

        if max_bytes > self.info["max_alloc_bytes"]:
            raise ErtError(f"a {max_bytes} byte transfer exceeds the largest buffer OpenCL device "
                           f"{self.info['device']!r} allocates ({self.info['max_alloc_bytes']} bytes)",
                           key="links.max_bytes")
        close_attr(self, "_links")
        self._links = opencl_links.OpenCLLinks(cl=self._cl, context=self.context, device=self.device,
                                               max_bytes=max_bytes)
        return self._links.transfers()

    def link_rated(self, reference=None) -> dict[str, dict]:
        """level -> {"gbytes_per_s": value or None, "derivation": text}: PCIe from sysfs on a GPU; on a CPU
        device no rated value, with ``reference()`` (this host's memory-copy rate, measured now) beside it."""
        from ert.backends import opencl_links

        measured = reference() if self.kind == "cpu" and reference is not None else None
        return opencl_links.link_rated(self.device, reference=measured)

    # -- metadata -------------------------------------------------------------------
    def describe(self) -> dict:
        import pyopencl as cl

        caches, memory_name = cache_hints(self.device, local_size=self.local_size)
        example = KernelSpec("fp32", 2, True)
        info = {
            "backend": NAME,
            **self.info,
            "device": f"{self.info['device']} ({self.info['platform']})",
            "device_name": self.info["device"],
            "selection": {**self.choice, "local_rank": self.local_rank, "local_size": self.local_size},
            "pyopencl": cl.VERSION_TEXT,
            "timing": "OpenCL profiling events (end - start) of one launch per timed region; trials in-kernel",
            "layout": "contiguous" if self.contiguous else "interleaved",
            "chains": self.chains,
            "vector_width": {p: self.vector_width(KernelSpec(p, 1, False)) for p in BITS
                             if self.supports(KernelSpec(p, 1, False))},
            "build_options": " ".join(o for o in self.build_options(example)
                                      if not o.startswith(("-DERT_BITS", "-DERT_VW", "-DERT_FMA_OPS", "-DERT_FMA="))),
            "build_options_per_kernel": "-DERT_BITS, -DERT_VW, -DERT_FMA_OPS, -DERT_FMA from the kernel variant",
            "caches": caches,
            "memory_name": memory_name,
        }
        info["fp_contract_off_checked"] = dict(self.contract)
        if self.kind == "cpu" and self._measured_cpu_reference() is not None:
            ref = dict(self._cpu_reference)
            rated = ref.pop("rated", None)
            info["cpu_reference"] = ref
            if isinstance(rated, dict):
                # The CPU device runs on these cores: its ceilings are rated against what they can do
                # (numba-cpu's microarchitecture table x the clock measured in the reference child),
                # as one device per rank (the driver's threads span this rank's cores).
                info["rated"] = {**rated, "per_core": False,
                                 "source": "host CPU: the OpenCL CPU device runs on these cores"}
        return info

    @property
    def warnings(self) -> list[str]:
        """No-FMA code the driver fused anyway; on a CPU device, that the numbers are the driver's, not the CPU's."""
        out = [contract_warning(p, n) for p, n in sorted(self.contract.items()) if n]
        if self.kind == "cpu":
            out.append(self._cpu_warning())
        return out

    def point_info(self) -> dict:
        return {}  # the launch geometry is in the point's record already

    def use_cpu_reference(self, measure) -> None:
        """``measure(threads)``: numba-cpu's FP64 FMA peak on this host (``ert.backends.CpuReferenceBackend``)."""
        self._measure_reference = measure

    def _measured_cpu_reference(self) -> dict | None:
        """numba-cpu's FP64 FMA peak on this node, measured once (a CPU device, rank 0 of the node), or None."""
        if (self.kind == "cpu" and self._want_reference and self._cpu_reference is None
                and self._measure_reference is not None):
            from ert.hardware import hwinfo

            self._cpu_reference = self._measure_reference(max(1, hwinfo.usable_cpus() // max(self.local_size, 1)))
        return self._cpu_reference

    def _cpu_warning(self) -> str:
        what = (f"OpenCL device is a CPU ({self.info['platform']} {self.info['driver_version']}, "
                f"{self.info['device']}): its ceilings are what this OpenCL driver's code reaches, not the "
                f"machine's; compare with `ert-run --backend numba-cpu`")
        ref = self._measured_cpu_reference() or {}
        if "gflops_per_s" in ref:
            return (f"{what} (measured here just before this run: numba-cpu FP64 FMA peak "
                    f"{ref['gflops_per_s']:.1f} GFLOP/s with {ref['threads']} thread"
                    f"{'s' if ref['threads'] != 1 else ''})")
        if "error" in ref:
            return f"{what} ({ref['error']})"
        return what
