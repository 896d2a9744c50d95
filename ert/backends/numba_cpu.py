"""Numba CPU backend: runs the ERT kernels of kernels/numba_cpu.py on this rank's cores."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from ert.backends import grow_buffer
from ert.backends.probe_cache import remembered
from ert.backends.numba_codegen import Geometry, asm_vector_bits, configure_numba_env, effective_codegen, vector_isa
from ert.backends.check import (A, A_INT, C, C_INT, CheckResult, fma_exact, initial_int_values, initial_values,
                                mix_expected_bits, replay_rw, ro_errors, ro_tolerance, rw_tolerance, verdict)
from ert.errors import held_interrupts
from ert.spec import KernelSpec, is_integer
from ert.hardware import no_rated_text

NAME = "numba-cpu"
ALIGN_BYTES = 64
# Timed runs per thread per clock chain; each thread's fastest counts (see measure_clock). 20 read the same clock
# as 50 within 0.1 % on a noisy Zen 4 host (3.688-3.691 against 3.690-3.693 GHz, 8 repeats each), in 0.10 s
# instead of 0.23 s of every run.
CLOCK_SAMPLES = 20
DTYPES = {"fp64": "float64", "fp32": "float32", "int32": "int32", "int64": "int64"}  # the precisions this backend runs


def probe():
    """(available, reason, detail) without importing numba: it must first see its environment."""
    from importlib import metadata as importlib_metadata
    from importlib.util import find_spec

    if find_spec("numba") is None or find_spec("llvmlite") is None:
        return False, "numba is not installed (pip install numba)", {}
    try:
        versions = {name: importlib_metadata.version(name) for name in ("numba", "llvmlite")}
    except importlib_metadata.PackageNotFoundError as exc:
        return False, f"numba is not installed ({exc})", {}
    return True, "", versions


def create(*, threads: int, options=None, local_rank: int = 0, local_size: int = 1) -> "NumbaCpuBackend":
    """The backend on ``threads`` of this rank's cores; it has no config block (``options`` is None) and the
    ranks' cores are placed before it is created (``local_rank``, ``local_size`` unused)."""
    if options is not None:
        raise TypeError(f"numba-cpu takes no backend options, got {options!r}")
    return NumbaCpuBackend(threads=threads)


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _aligned_empty(n_elements: int, dtype):
    import numpy as np

    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n_elements * itemsize + ALIGN_BYTES, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGN_BYTES
    return raw[offset:offset + n_elements * itemsize].view(dtype)


class NumbaCpuBackend:
    """The Backend protocol over Numba's parallel loops: one contiguous block per thread.

    The kernels work on sub-blocks of ``chains`` vector registers (see
    kernels/numba_cpu.py).  How many chains a core needs depends on the
    machine, so the compute kernels sweep it like a GPU's launch geometry
    (``launches``); the analysis keeps the fastest per working set.
    """

    name = NAME
    device_id = None  # ranks own their cores (placement), not a shared device

    def __init__(self, *, threads: int):
        if threads < 1:
            raise ValueError("threads must be >= 1")
        configure_numba_env(threads)
        import numba
        import numpy as np

        from ert.kernels import numba_cpu as kernels

        self._np = np
        self._numba = numba
        self._k = kernels
        numba.set_num_threads(threads)
        self.threads = threads
        self._codegen = effective_codegen()
        self.geometry = Geometry(*vector_isa(self._codegen["cpu_features"]))
        self.vector_bytes, self.vector_registers = self.geometry.vector_bytes, self.geometry.vector_registers
        self.chains, self.ro_accumulators = self.geometry.chains, self.geometry.ro_accumulators
        self.add_unroll = Geometry.ADD_UNROLL
        # The smaller thread counts whose clock the rated values need (a thread-scaling run's); ert-run sets them
        # from its config, and a run of one thread count measures its own clock alone.
        self.clock_thread_counts: tuple[int, ...] = (1,)
        self._kernels: dict = {}
        from ert.hardware import arm

        # qemu-user and the like: the rates are the emulator's (ert.hardware.arm.emulation).
        self.emulated = arm.emulation()
        self._buf = None        # the aligned allocation, grown as needed and reused
        self._spec: KernelSpec | None = None
        self._n = 0
        self._trials_done = 0
        self._ro_out = None
        self._width = 0
        self._described: dict | None = None

    # -- metadata -------------------------------------------------------------
    def describe(self) -> dict:
        """Device, what Numba compiled with, and the rated ceilings (measured once per backend)."""
        if self._described is None:
            from ert.hardware import arm, hwinfo

            device = hwinfo.cpu_model()  # on Arm, the core its MIDR names
            if self.emulated:
                device = f"emulated {platform.machine()} CPU on {device or 'another machine'}"
            self._described = {
                "backend": NAME,
                "device": f"{device} ({self.threads} threads)",
                "threads": self.threads,
                "numba_threading_layer": self._threading_layer(),
                "llvm_cpu": self._codegen["cpu_name"],
                # What the measuring process really compiled with, not the environment variable.
                "numba_effective": {**self._codegen, "vector_bits": self.vector_bits_compiled(),
                                    "vector_registers": self.vector_registers},
                "numba_cpu_features_env": os.environ.get("NUMBA_CPU_FEATURES", "host default"),
                "pinning": {k: os.environ.get(k, "") for k in ("OMP_PROC_BIND", "OMP_PLACES")},
                "alignment_bytes": ALIGN_BYTES,
                "chains_swept": list(self.chains),
                "ro_accumulators": self.ro_accumulators,
                "rated": self.rated(),
            }
            isa = arm.cpu_isa(self._described["numba_effective"]["vector_bits"])
            if isa:
                self._described["cpu_isa"] = isa
            if self.emulated:
                self._described["emulated"] = self.emulated
        return dict(self._described)

    def vector_bits_compiled(self) -> int | None:
        """Width of the registers the hot loops use, read from the assembly of an uncached compile.

        The answer is kept beside Numba's cache of the kernels (``ert.backends.probe_cache``), keyed by everything
        that decides it: Numba's and llvmlite's versions, the CPU name and features the code generator targets, the
        probe's width and the kernels' source (its size and modification time, as Numba's own cache keys it).
        A later run on the same machine reads it instead of compiling again (0.4 s on x86, 3.6 s under qemu)."""
        import llvmlite
        import numba

        source = Path(self._k.__file__)
        stat = source.stat()
        key = "|".join(str(x) for x in (numba.__version__, llvmlite.__version__, self._codegen["cpu_name"],
                                        self._codegen["cpu_features"], self.add_unroll, self.vector_bytes,
                                        source.resolve(), stat.st_size, stat.st_mtime_ns))
        folder = Path(os.environ["NUMBA_CACHE_DIR"]) if os.environ.get("NUMBA_CACHE_DIR") else \
            source.parent / "__pycache__"
        return remembered(folder / "ert-vector-probe.json", key, self._compile_vector_probe)

    def _compile_vector_probe(self) -> int | None:
        from numba import njit

        sub_add = self._k.sub_add
        width = self.add_unroll * self.vector_bytes // 8

        def probe_kernel(buf, c):
            sub_add(buf, 0, c, width)

        compiled = njit(cache=False)(probe_kernel)
        buf = self._np.zeros(width)
        compiled(buf, 1.0)
        return asm_vector_bits(compiled.inspect_asm(compiled.signatures[0]))

    def rated(self) -> dict:
        """The rated ceilings of the cores this backend runs on, with their derivation."""
        from ert.hardware import cpu, hwinfo

        if self.emulated:  # no clock, no table: an emulator's rates say nothing about a machine
            why = no_rated_text(f"the CPU is emulated ({self.emulated}); its rates are the emulator's, not a "
                                f"machine's")
            return {**cpu.rated_ceilings(arch=None, why_none=why, clock_ghz=None, clock_how="not measured (emulated)",
                                         cores=hwinfo.cores_in_use(self.threads)),
                    "cores_per_rank": hwinfo.cores_in_use(self.threads), "per_core": True, "emulated": True}
        arch, why = cpu.lookup(self._table_key(), hwinfo.cpu_model())
        latency = arch.fma_latency if arch else 4
        try:
            clock = self.measure_clock(latency)
        except Exception as exc:  # no user-space counter on this ISA, say: no rated value, and why
            clock = {"vector_ghz": None, "how": f"not measured: {type(exc).__name__}: {exc}".splitlines()[0]}
            why = why or no_rated_text(f"the sustained clock could not be measured ({clock['how']})")
        cores = hwinfo.cores_in_use(self.threads)
        rated = cpu.rated_ceilings(arch=arch, why_none=why, clock_ghz=clock["vector_ghz"],
                                         clock_how=clock["how"], cores=cores)
        # One core alone may boost higher than all of them together: a 1-thread
        # sweep (--threads 1,N) is rated at the clock one busy core reaches.
        by_threads = {str(self.threads): clock["vector_ghz"]}
        for count in sorted({c for c in self.clock_thread_counts if 0 < c < self.threads}):
            if clock["vector_ghz"]:
                by_threads[str(count)] = self.measure_clock(latency, threads=count)["vector_ghz"]
        rated.update(cores_per_rank=cores, per_core=True, clock=clock, clock_ghz_by_threads=by_threads)
        return rated

    def _table_key(self) -> str:
        """The CPU's row of ert.hardware.cpu.TABLE: LLVM's name for it, or on Arm the core its MIDR names (an
        LLVM older than the core calls a Neoverse V2 "generic" or an older core's name)."""
        from ert.hardware import arm

        described = arm.parse_cpuinfo(_cpuinfo())
        return described.table_key if described is not None and described.table_key else self._codegen["cpu_name"]

    def measure_clock(self, fma_latency: int, threads: int | None = None) -> dict:
        """The sustained clock under vector load: a dependent FMA chain of known latency on every thread.

        Cross-checked by a dependent integer-multiply chain (3 cycles on x86).
        Each thread times CLOCK_SAMPLES runs of about 2 ms itself, with the
        time-stamp counter, and keeps its fastest: a run is spoilt only when
        that thread is preempted, so the fastest is the clock even while other
        work shares the cores.  The clock is the median over the threads.
        """
        np = self._np
        threads = threads or self.threads
        k = self._k
        chain = k.make_fma_latency_chain(self.vector_bytes // 8)
        ticks = np.zeros(threads, dtype=np.int64)
        with held_interrupts():  # compile or load; never timed
            chain(threads, 100, 1, 0.5, ticks)
            k.imul_latency_chain(threads, 100, 1, 3, ticks)
        tick_hz = self._tick_hz()
        cycles = 8_000_000  # about 2 ms at 4 GHz
        fma_n, imul_n = cycles // fma_latency, cycles // 3
        chain(threads, fma_n, CLOCK_SAMPLES, 0.5, ticks)
        fma_s = float(np.median(ticks)) / tick_hz
        k.imul_latency_chain(threads, imul_n, CLOCK_SAMPLES, 3, ticks)
        imul_s = float(np.median(ticks)) / tick_hz
        from ert.hardware.cpu import clock_from_chains

        vec, scalar, how = clock_from_chains(fma_seconds=fma_s, fma_count=fma_n, fma_latency=fma_latency,
                                             imul_seconds=imul_s, imul_count=imul_n,
                                             vector_bits=8 * self.vector_bytes)
        agree = abs(vec - scalar) <= 0.1 * scalar
        return {"vector_ghz": round(vec, 3), "integer_ghz": round(scalar, 3), "agree": agree, "how": how,
                "samples": CLOCK_SAMPLES, "tsc_ghz": round(tick_hz / 1e9, 4)}

    def _tick_hz(self) -> float:
        """Time-stamp-counter ticks per second, against the OS's monotonic clock over 50 ms (median of 3); measured
        once per backend (the clocks of every thread count share it)."""
        if getattr(self, "_tick", None):
            return self._tick
        read = self._k.read_cycle_counter
        read()
        rates = []
        for _ in range(3):
            t0, c0 = time.perf_counter(), read()
            time.sleep(0.05)
            c1, t1 = read(), time.perf_counter()
            rates.append((c1 - c0) / (t1 - t0))
        self._tick = sorted(rates)[1]
        return self._tick

    def _threading_layer(self) -> str:
        try:
            return self._numba.threading_layer()
        except ValueError:  # no parallel region has run yet
            return os.environ.get("NUMBA_THREADING_LAYER", "default")

    # -- the protocol ----------------------------------------------------------
    def _widths(self, spec: KernelSpec) -> dict[int, int]:
        return self.geometry.widths(spec)

    def granule_elements(self, spec: KernelSpec) -> int:
        return self.geometry.granule_elements(spec)

    def launches(self, spec: KernelSpec, elements_per_thread: int) -> list[dict]:
        return self.geometry.launches(spec, elements_per_thread)

    def supports(self, spec: KernelSpec) -> bool:
        # The integer precisions run the read+write kernels only (no load-only sum).
        return spec.precision in DTYPES and not (is_integer(spec.precision) and spec.access == "ro")

    def supports_mix(self, mix: str) -> bool:
        """Every mix of ert.spec.MIXES runs here."""
        return True

    def _kernel(self, spec: KernelSpec, width: int):
        key = (spec.access, spec.flops_per_element == 1, spec.fma, width, spec.op, spec.mix, spec.itemsize)
        if key not in self._kernels:
            k = self._k
            if spec.mix:
                self._kernels[key] = k.make_rw_mix(width, 0 if spec.mix == "fma+add" else 1)
            elif spec.op == "add":
                self._kernels[key] = k.make_rw_iadd(width, self.vector_bytes // spec.itemsize)
            elif spec.access == "ro":
                self._kernels[key] = k.make_ro_sum(width)
            elif spec.flops_per_element == 1:
                self._kernels[key] = k.make_rw_add(width)
            else:
                self._kernels[key] = k.make_rw_madd(width, spec.fma)
        return self._kernels[key]

    def prepare(self, spec: KernelSpec, *, elements_per_thread: int, launch: dict | None = None) -> None:
        if not self.supports(spec):
            raise ValueError(f"{NAME} does not run {spec.precision}")
        granule = self.granule_elements(spec)
        if elements_per_thread < granule or elements_per_thread % granule:
            raise ValueError(f"elements_per_thread must be a multiple of {granule}")
        widths = self._widths(spec)
        chains = (launch or {}).get("chains", max(widths))
        if chains not in widths:
            raise ValueError(f"{spec.key}: {chains} chains is not one of {sorted(widths)}")
        self._width = widths[chains]
        dtype = self._np.dtype(DTYPES[spec.precision])
        total = elements_per_thread * self.threads
        need = total * dtype.itemsize
        grow_buffer(self, "_buf", need_bytes=need, nbytes=lambda b: b.nbytes,
                    allocate=lambda n: _aligned_empty(n // 8 + 1, self._np.float64).view(self._np.uint8))
        buf = self._buf[:need].view(dtype)
        self._spec, self._n, self._trials_done = spec, elements_per_thread, 0
        self._view = buf
        self._k.init_blocks(buf, self.threads, elements_per_thread, self._initial16(spec, dtype))
        self._ro_out = self._np.zeros(self.threads, dtype=self._np.float64)
        # Compile or load from cache now, never inside a timed region, with Ctrl-C held (llvmlite's callbacks
        # would swallow it).  The multiply-add kernels return whether they were built to fuse: a cache
        # entry of the wrong variant would otherwise go unnoticed.
        with held_interrupts():
            self._fn = self._kernel(spec, self._width)
            fused = self._call(0)
        if spec.access == "rw" and spec.flops_per_element > 1 and not spec.mix and spec.op == "madd" \
                and bool(fused) != spec.fma:
            raise RuntimeError(f"{spec.key}: the loaded kernel was built with fma={bool(fused)}; "
                               f"clear Numba's cache (__pycache__ beside kernels/numba_cpu.py)")

    @staticmethod
    def _initial16(spec: KernelSpec, dtype):
        """The 16 starting values init_blocks writes, from the module every replay reads them from."""
        return initial_int_values(spec.precision) if is_integer(spec.precision) else initial_values(dtype)

    def _flush_subblocks(self) -> int:
        """Sub-blocks the load-only accumulators take in before they are reduced (keeps every FP32 sum exact)."""
        return 1 << 62 if self._spec.precision == "fp64" else self._k.FP32_EXACT_ADDS

    def _call(self, trials: int):
        spec, buf, n, nt = self._spec, self._view, self._n, self.threads
        integer = is_integer(spec.precision)
        a = buf.dtype.type(A_INT if integer else A)
        c = buf.dtype.type(C_INT if integer else C)
        if spec.access == "ro":
            return self._fn(buf, nt, n, trials, self._flush_subblocks(), self._ro_out)
        if spec.mix:
            ints = self._np.int64 if spec.itemsize == 8 else self._np.int32
            return self._fn(buf, nt, n, trials, self._trials_done, spec.fma_ops_per_element, a, c,
                            ints(A_INT), ints(C_INT))
        if spec.op == "add":
            return self._fn(buf, nt, n, trials, self._trials_done, spec.add_ops_per_element, c)
        if spec.flops_per_element == 1:
            return self._fn(buf, nt, n, trials, self._trials_done, c)
        return self._fn(buf, nt, n, trials, self._trials_done, spec.fma_ops_per_element, a, c)

    def run(self, trials: int) -> float:
        start = time.perf_counter()
        self._call(trials)
        seconds = time.perf_counter() - start
        self._trials_done += trials
        return seconds

    def check(self) -> CheckResult:
        np = self._np
        spec, buf, n, trials = self._spec, self._view, self._n, self._trials_done
        if spec.access == "ro":
            # init_blocks repeats 16 values; n is a whole number of granules, so of 16s.
            expected = float(initial_values(np.float64).sum()) * (n // 16) * trials
            sums = self._ro_out.astype(np.float64)
            err, t = ro_errors(sums, np.full(sums.size, expected))
            return verdict(error=err, tolerance=ro_tolerance(spec), what=f"load-only sum of thread {t}",
                           got=float(sums[t]), expected=expected, trials=trials)
        if spec.mix:
            return self._check_mix()
        expected16 = replay_rw(spec, trials=trials)
        if is_integer(spec.precision):  # exact: every element equals the replay, bit for bit
            bad = np.zeros((self.threads, 2), dtype=np.int64)
            self._k.int_mismatches(buf, self.threads, n, expected16, bad)
            t = int(bad[:, 0].argmax())
            i = max(int(bad[t, 1]), 0)
            count = int(bad[:, 0].sum())
            return verdict(error=float("inf") if count else 0.0, tolerance=0.0, what=f"element {i} of thread {t}",
                           got=int(buf[t * n + i]), expected=int(expected16[i % 16]), trials=trials, count=count)
        # The metric of ert.backends.check.relative_errors, computed in parallel in place.
        worst = np.zeros((self.threads, 2), dtype=np.float64)
        self._k.max_rel_error(buf, self.threads, n, expected16.astype(np.float64), worst)
        t = int(worst[:, 0].argmax())
        i = max(int(worst[t, 1]), 0)  # -1: no element is off at all
        return verdict(error=float(worst[t, 0]), tolerance=rw_tolerance(spec), what=f"element {i} of thread {t}",
                       got=buf[t * n + i], expected=expected16[i % 16], trials=trials)

    def _check_mix(self) -> CheckResult:
        """Every element of a mix kernel against the replay of its half, bit for bit (ert.backends.check.replay_mix)."""
        np = self._np
        spec, n, trials = self._spec, self._n, self._trials_done
        expected = mix_expected_bits(spec, trials=trials, width=self._width, n=n)
        udt = expected.dtype
        bits = self._view.view(udt).reshape(self.threads, n)
        if fma_exact(spec.precision):
            bad = bits != expected[None, :]
        else:  # the FMA half rounds twice in the replay: compare it within the tolerance
            got = bits.view(self._view.dtype).astype(np.float64)
            want = expected.view(self._view.dtype).astype(np.float64)
            bad = np.abs(got - want) > 1e-12 * np.maximum(np.abs(want), 1.0)
            bad |= (np.arange(n) % self._width >= self._width // 2)[None, :] & (bits != expected[None, :])
        count = int(bad.sum())
        if not count:
            return verdict(error=0.0, tolerance=0.0, what="", got=None, expected=None, trials=trials)
        t, i = (int(v) for v in np.argwhere(bad)[0])
        half = "FMA" if i % self._width < self._width // 2 else ("add" if spec.mix == "fma+add" else "integer")
        return verdict(error=float("inf"), tolerance=0.0, what=f"element {i} ({half} half) of thread {t}",
                       got=hex(int(bits[t, i])), expected=hex(int(expected[i])), trials=trials, count=count)

    # -- also in the protocol ----------------------------------------------------
    @property
    def warnings(self) -> list[str]:
        # Placement's warnings (shared cores, oversubscription) are the CLI's; an emulated CPU is this backend's.
        if not self.emulated:
            return []
        from ert.records.warning_codes import warn

        return [warn("emulated-cpu", f"the CPU is emulated ({self.emulated}): the rates are the emulator's, not "
                                     f"a machine's, and no rated value is given; the compiled code, the checks of "
                                     f"every result and the analysis are real")]

    def unsupported_reason(self, precision: str) -> str:
        return f"{NAME} runs {', '.join(DTYPES)} only, not {precision}"

    def point_info(self) -> dict:
        return {}

    def corrupt_for_test(self) -> None:
        """Test-only: damage one value that check() examines (an element, or a load-only sum)."""
        if self._spec.access == "ro":
            self._ro_out[0] += 12345.0
        else:
            self._view[self._view.size // 2 + 5] = 3

    def close(self) -> None:
        self._buf = None
        self._view = None

