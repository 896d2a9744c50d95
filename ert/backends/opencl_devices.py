"""OpenCL devices for the opencl backend: discovery, the probe, selection by name/index/type, metadata and cache hints."""

from __future__ import annotations

import os
import re

from ert.errors import ErtError

# The OpenCL extensions each precision needs; fp32 needs none.
EXTENSION_OF = {"fp64": "cl_khr_fp64", "fp16": "cl_khr_fp16"}
TYPE_NAMES = ("cpu", "gpu", "accelerator")


def _import_cl():
    import pyopencl as cl

    return cl


def type_name(device) -> str:
    """"cpu", "gpu", "accelerator" or "other" from the device's type bits."""
    cl = _import_cl()
    bits = device.type
    for name, flag in (("gpu", cl.device_type.GPU), ("accelerator", cl.device_type.ACCELERATOR),
                       ("cpu", cl.device_type.CPU)):
        if bits & flag:
            return name
    return "other"


def precisions_of(device) -> dict[str, bool]:
    """Which precisions the device runs: fp32 always, fp64/fp16 only with their extension."""
    extensions = set(device.extensions.split())
    return {"fp64": EXTENSION_OF["fp64"] in extensions, "fp32": True, "fp16": EXTENSION_OF["fp16"] in extensions}


def is_pocl(device) -> bool:
    return "pocl" in device.platform.vendor.lower() or "portable computing language" in device.platform.name.lower()


def all_devices() -> list[tuple[int, int, object]]:
    """(platform index, device index within the platform, device) for every device.

    Raises ErtError with a one-line reason when there is no platform (no ICD
    registered with the loader) or no device at all.
    """
    cl = _import_cl()
    try:
        platforms = cl.get_platforms()
    except (cl.Error, RuntimeError) as exc:
        raise ErtError(f"no OpenCL platform found: the ICD loader lists none ({_short(exc)}); install a driver, "
                       f"e.g. `pip install pocl-binary-distribution` or Debian's pocl-opencl-icd",
                       key="backend") from None
    found = []
    for p_index, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except (cl.Error, RuntimeError):  # a platform with no devices raises DEVICE_NOT_FOUND
            devices = []
        found.extend((p_index, d_index, d) for d_index, d in enumerate(devices))
    if not found:
        names = ", ".join(p.name for p in platforms)
        raise ErtError(f"OpenCL platform(s) {names} list no device", key="backend")
    return found


def _short(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__


def device_line(p_index: int, d_index: int, device) -> str:
    """One line of `ert backends`: index, name, type, platform and the fp64/fp16 support."""
    prec = precisions_of(device)
    yes = {True: "yes", False: "no"}
    return (f"[{p_index}:{d_index}] {device.name.strip()} ({type_name(device)}; {device.platform.name.strip()}; "
            f"{device.max_compute_units} compute units; fp64 {yes[prec['fp64']]}, fp16 {yes[prec['fp16']]})")


# A kernel any OpenCL C compiler builds: whether a device's driver can build programs here at all.
PROBE_SOURCE = "__kernel void ert_probe(__global float *x) { x[get_global_id(0)] += 1.0f; }"
# Device -> "" (it builds) or why not: the probe builds once per device and process.
_BUILD_PROBLEMS: dict[tuple, str] = {}


def first_error_line(message: str) -> str:
    """The first error line of a failed build's message (PyOpenCL's exception text holds the driver's log).

    The first line with ``error:`` in it (clang's ``<kernel>:3:5: error: ...``,
    PoCL's ``error: unknown target CPU ...``); else the first line of the log
    after PyOpenCL's ``Build on <device>:`` line; else the message's first line.
    """
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return "no build log"
    for line in lines:
        if re.search(r"\berror\s*:", line, re.IGNORECASE):
            return line[:240]
    for i, line in enumerate(lines):
        if line.startswith("Build on") and i + 1 < len(lines) and not lines[i + 1].startswith("(options:"):
            return lines[i + 1][:240]
    return lines[0][:240]


def build_failure(device, message: str) -> str:
    """``DRIVER: first error line`` of a failed build, with what it means where that is known."""
    line = first_error_line(message)
    line = re.sub(r"^error\s*:\s*", "", line, flags=re.IGNORECASE)
    pocl = is_pocl(device)
    why = f"{'PoCL' if pocl else device.platform.name.strip()}: {line}"
    if pocl and "unknown target cpu" in line.lower():
        why += "; its LLVM does not know this CPU"
    return why


def build_program(context, device, source: str, options=(), *, what: str = "a kernel"):
    """``source`` built for ``device``; an ErtError naming the device and the first error line if it fails."""
    cl = _import_cl()
    try:
        return cl.Program(context, source).build(options=list(options), devices=[device])
    except cl.Error as exc:
        raise ErtError(f"OpenCL device {device.name.strip()!r} ({device.platform.name.strip()}) cannot build "
                       f"{what}: {build_failure(device, str(exc))}", key="backend") from None


def build_problem(device) -> str:
    """"" where the device's driver builds a trivial kernel, else a one-line reason; once per device and process."""
    key = (int(device.int_ptr), device.platform.name, device.name, device.driver_version)
    if key not in _BUILD_PROBLEMS:
        cl = _import_cl()
        try:
            context = cl.Context([device])
            cl.Program(context, PROBE_SOURCE).build(devices=[device])
            problem = ""
        except cl.Error as exc:
            text = str(exc)
            if "BUILD_PROGRAM_FAILURE" in text or "Build on" in text:
                problem = f"the driver cannot build kernels here ({build_failure(device, text)})"
            else:
                problem = f"the driver cannot run kernels here ({type(exc).__name__}: {_short(exc)})"
        except Exception as exc:  # never let one device break the probe
            problem = f"the driver cannot run kernels here ({type(exc).__name__}: {_short(exc)})"
        _BUILD_PROBLEMS[key] = problem
    return _BUILD_PROBLEMS[key]


# Device nodes of the GPUs and accelerators an OpenCL driver drives on Linux: DRM render nodes (AMD, Intel, Mali,
# and NVIDIA's open modules), AMD's compute node, NVIDIA's, Mali's own, and the kernel's accel class.
ACCELERATOR_NODES = ("/dev/dri/renderD*", "/dev/kfd", "/dev/nvidia[0-9]*", "/dev/mali*", "/dev/accel/accel*")


def no_accelerators() -> bool:
    """True where OpenCL can see no GPU or accelerator here, known without loading a driver: Linux without any of
    ``ACCELERATOR_NODES`` (its OpenCL devices can only be CPUs, as PoCL's).  False elsewhere (another OS, or a
    node present): the probe decides."""
    import glob
    import sys

    return sys.platform.startswith("linux") and not any(glob.glob(pattern) for pattern in ACCELERATOR_NODES)


def probe():
    """(available, reason, detail) for the registry; never raises.

    Every device must build a trivial kernel (once per process; drivers
    cache builds): a device whose driver cannot build is listed as unusable
    with the driver's reason, and with no usable device the backend is
    unavailable for that reason.
    """
    try:
        cl = _import_cl()
    except ImportError as exc:
        return False, f"pyopencl is not installed ({exc}); pip install 'ert[opencl]'", {}
    except Exception as exc:  # a broken install (missing libOpenCL, ...)
        return False, f"pyopencl cannot load: {type(exc).__name__}: {_short(exc)}", {}
    try:
        found = all_devices()
    except ErtError as exc:
        return False, exc.message, {"pyopencl": cl.VERSION_TEXT}
    except Exception as exc:
        return False, f"OpenCL device query failed: {type(exc).__name__}: {_short(exc)}", {}
    problems = [build_problem(d) for _, _, d in found]
    lines = [device_line(p, i, d) + (f" unusable: {problem}" if problem else "")
             for (p, i, d), problem in zip(found, problems)]
    usable = [c for c, problem in zip(found, problems) if not problem]
    if not usable:
        reason = "; ".join(f"{d.name.strip()}: {problem}" for (_, _, d), problem in zip(found, problems))
        return False, reason, {"pyopencl": cl.VERSION_TEXT, "devices": lines}
    accelerators = sum(1 for _, _, d in usable if type_name(d) != "cpu")
    return True, "", {
        "pyopencl": cl.VERSION_TEXT,
        "accelerators": accelerators,
        "devices": lines,
    }


# Device types in order of preference when the config leaves the choice open:
# PoCL's CPU device (the opencl extra installs it) must not win over a real GPU
# because of the order the ICD loader lists platforms in.
TYPE_PREFERENCE = {"gpu": 0, "accelerator": 1, "other": 2, "cpu": 3}


def preferred_order(candidates: list[tuple[int, int, object]]) -> list[tuple[int, int, object]]:
    """GPUs, then accelerators, then CPU devices; the loader's order within each type."""
    return sorted(candidates, key=lambda c: TYPE_PREFERENCE.get(type_name(c[2]), 2))


def spread_over(candidates: list[tuple[int, int, object]], local_rank: int) -> tuple[tuple[int, int, object], str]:
    """The device of the rank with index ``local_rank`` on its node, among usable ``candidates``, and why.

    Only the most preferred type present counts: on a node with GPUs, ranks
    spread over the GPUs (modulo their count), never onto a CPU driver listed
    after them.  CPU devices are one CPU however many drivers list it (Debian's
    PoCL and the pip one, say): every rank takes the first, so that no run
    mixes two drivers' code.
    """
    ordered = preferred_order(candidates)
    best = TYPE_PREFERENCE.get(type_name(ordered[0][2]), 2)
    same = [c for c in ordered if TYPE_PREFERENCE.get(type_name(c[2]), 2) == best]
    if type_name(same[0][2]) == "cpu":
        return same[0], (f"the first usable CPU device (every rank: {len(same)} CPU driver(s) list this one CPU)"
                         if len(same) > 1 else "the only usable CPU device")
    kind = type_name(same[0][2])
    return same[local_rank % len(same)], f"local rank {local_rank} modulo {len(same)} matching {kind} device(s)"


def _matches(text: str, *names: str) -> bool:
    return text.lower() in " ".join(n.lower() for n in names)


def select_device(options, *, local_rank: int = 0):
    """The device the OpenCLOptions ask for, and a record of how it was chosen.

    ``platform``: index or name substring (null: every platform);
    ``device_type``: all, cpu, gpu or accelerator; ``device``: index among the
    matching devices, or name substring (null: every matching device).  Among
    the remaining devices whose driver builds kernels (``build_problem``; a
    device picked by index that cannot is an error naming the driver's
    reason), the most preferred type present (GPUs, then accelerators, then
    CPUs) is kept and the rank's index within its node picks one (modulo
    their count), so ranks on a node spread over its GPUs; a CPU is the
    first CPU device for every rank (``spread_over``).
    """
    found = all_devices()
    platform_names = sorted({(p, d.platform.name.strip()) for p, _, d in found})
    candidates = found
    if options.platform is not None:
        if isinstance(options.platform, int):
            candidates = [c for c in candidates if c[0] == options.platform]
        else:
            candidates = [c for c in candidates
                          if _matches(options.platform, c[2].platform.name, c[2].platform.vendor)]
        if not candidates:
            listed = ", ".join(f"{i}: {n}" for i, n in platform_names)
            raise ErtError(f"no OpenCL platform matches {options.platform!r} (platforms: {listed})",
                           key="opencl.platform")
    if options.device_type != "all":
        candidates = [c for c in candidates if type_name(c[2]) == options.device_type]
        if not candidates:
            raise ErtError(f"no OpenCL device of type {options.device_type} (devices: "
                           f"{'; '.join(device_line(*c) for c in found)})", key="opencl.device_type")
    if isinstance(options.device, int):
        if not 0 <= options.device < len(candidates):
            raise ErtError(f"device index {options.device} is out of range: {len(candidates)} device(s) match "
                           f"({'; '.join(device_line(*c) for c in candidates)})", key="opencl.device")
        chosen, picked_by = candidates[options.device], f"index {options.device} of {len(candidates)} matching"
        problem = build_problem(chosen[2])
        if problem:
            raise ErtError(f"device {device_line(*chosen)} cannot be used: {problem}", key="opencl.device")
    else:
        candidates = preferred_order(candidates)
        if options.device is not None:
            candidates = [c for c in candidates if _matches(options.device, c[2].name)]
            if not candidates:
                raise ErtError(f"no OpenCL device name contains {options.device!r} (devices: "
                               f"{'; '.join(device_line(*c) for c in found)})", key="opencl.device")
        usable = [c for c in candidates if not build_problem(c[2])]
        if not usable:
            raise ErtError("no matching OpenCL device can be used (" + "; ".join(
                f"{c[2].name.strip()}: {build_problem(c[2])}" for c in candidates) + ")", key="opencl.device")
        candidates = usable
        chosen, picked_by = spread_over(candidates, local_rank)
    p_index, d_index, device = chosen
    return device, {"platform_index": p_index, "device_index": d_index, "matching": len(candidates),
                    "picked_by": picked_by}


def parse_selector(text: str) -> dict:
    """OpenCLOptions fields from a command-line device selector.

    ``gpu`` / ``cpu`` / ``accelerator`` (a type), ``2`` (an index among all
    devices), ``P:D`` (platform index or name substring, then device index or
    name substring, either may be empty), or a device name substring.
    """
    def value(part: str):
        part = part.strip()
        return int(part) if part.isdigit() else (part or None)

    text = text.strip()
    if text.lower() in TYPE_NAMES:
        return {"device_type": text.lower()}
    if ":" in text:
        platform, device = text.split(":", 1)
        return {"platform": value(platform), "device": value(device)}
    return {"device": value(text)}


def device_info(device) -> dict:
    """What the metadata records about one device (all as the driver reports it)."""
    prec = precisions_of(device)
    return {
        "device": device.name.strip(),
        "device_type": type_name(device),
        "device_vendor": device.vendor.strip(),
        "device_version": device.version.strip(),
        "driver_version": device.driver_version.strip(),
        "opencl_c_version": getattr(device, "opencl_c_version", "").strip(),
        "platform": device.platform.name.strip(),
        "platform_vendor": device.platform.vendor.strip(),
        "platform_version": device.platform.version.strip(),
        "compute_units": int(device.max_compute_units),
        "max_clock_mhz": int(device.max_clock_frequency),
        "local_mem_bytes": int(device.local_mem_size),
        "global_mem_cache_bytes": int(device.global_mem_cache_size),
        "global_mem_cacheline_bytes": int(device.global_mem_cacheline_size),
        "global_mem_bytes": int(device.global_mem_size),
        "max_alloc_bytes": int(device.max_mem_alloc_size),
        "max_work_group_size": int(device.max_work_group_size),
        "fp64": prec["fp64"],
        "fp16": prec["fp16"],
    }


def cache_hints(device, *, local_size: int = 1) -> tuple[list[dict], str]:
    """(caches, memory name) that name the bandwidth levels of this device.

    The analysis counts one "thread" per rank for a device backend, so each
    entry's size is the capacity one rank's share of the device sees: a CPU
    device runs on ``compute_units`` cpus (private caches count once per cpu),
    and the ``local_size`` ranks of a node share that CPU.  A GPU: see
    ``gpu_cache_hints``.
    """
    if type_name(device) == "cpu":
        from ert.hardware import hwinfo

        cpus = os.cpu_count() or 1
        used = max(1, min(int(device.max_compute_units), cpus))
        caches = [{"level": c.level, "kind": c.kind, "shared_cpu_count": 1,
                   "size_bytes": max(1, hwinfo.aggregate_capacity_bytes(c, used, cpus=cpus) // max(local_size, 1))}
                  for c in hwinfo.read_cpu_caches()]
        if not caches and device.global_mem_cache_size:
            caches = [{"level": 2, "kind": "Unified", "shared_cpu_count": 1,
                       "size_bytes": int(device.global_mem_cache_size)}]
        return caches, "DRAM"
    vendor = f"{device.vendor} {device.platform.vendor}"
    return gpu_cache_hints(vendor=vendor, global_mem_cache_bytes=int(device.global_mem_cache_size or 0),
                           host_unified=bool(device.host_unified_memory),
                           cuda_facts=nvidia_facts(device.name.strip()) if is_nvidia(vendor) else None)


def is_nvidia(vendor: str) -> bool:
    return "nvidia" in vendor.lower()


def gpu_cache_hints(*, vendor: str, global_mem_cache_bytes: int, host_unified: bool,
                    cuda_facts: dict | None = None) -> tuple[list[dict], str]:
    """(caches, memory name) of a GPU from what its OpenCL driver means by CL_DEVICE_GLOBAL_MEM_CACHE_SIZE.

    NVIDIA's driver reports every SM's L1 summed, not the L2: a level-1 hint
    that, as on the cuda backend, applies to read-only curves alone (the L1 is
    write-through).  The L2 and the memory bus come from CUDA (``cuda_facts``:
    ``l2_bytes``, ``memory_bus_bits``) where CuPy can see the same card.  Other
    vendors report their last-level cache (AMD: the L2).  The memory level is
    named as the cuda backend names it (``ert.hardware.nvidia.memory_name``): HBM on a
    bus of 1024 bits or more, DRAM otherwise or when unknown.
    """
    from ert.hardware.nvidia import memory_name

    facts = cuda_facts or {}
    caches = []
    if is_nvidia(vendor):
        if global_mem_cache_bytes:
            caches.append({"level": 1, "kind": "Data", "size_bytes": global_mem_cache_bytes, "shared_cpu_count": 1,
                           "access": ["ro"]})
        if facts.get("l2_bytes"):
            caches.append({"level": 2, "kind": "Unified", "size_bytes": int(facts["l2_bytes"]),
                           "shared_cpu_count": 1})
    elif global_mem_cache_bytes:
        caches.append({"level": 2, "kind": "Unified", "size_bytes": global_mem_cache_bytes, "shared_cpu_count": 1})
    return caches, memory_name(facts.get("memory_bus_bits"), host_unified=host_unified)


def nvidia_facts(name: str) -> dict | None:
    """L2 size and memory bus width of the NVIDIA GPU called ``name``, from CuPy; None where it cannot tell."""
    try:
        import cupy

        runtime = cupy.cuda.runtime
        for index in range(runtime.getDeviceCount()):
            props = runtime.getDeviceProperties(index)
            found = props.get("name", b"")
            found = found.split(b"\0", 1)[0].decode(errors="replace") if isinstance(found, bytes) else str(found)
            if found.strip() == name:
                return {"l2_bytes": int(props.get("l2CacheSize", 0)),
                        "memory_bus_bits": int(props.get("memoryBusWidth", 0))}
    except Exception:  # no CuPy or no CUDA driver: the L2 stays unknown
        return None
    return None


def fused_multiply_adds(binary: bytes, kernel: str = "ert_rw") -> int | None:
    """Fused multiply-adds in a program binary, where its format is readable; None otherwise.

    PTX (NVIDIA's OpenCL binary): ``fma.rn`` and ``mad.rn`` instructions of
    any float type in the entry ``kernel`` (elsewhere a division may expand to
    FMAs legitimately).  LLVM bitcode (PoCL): ``llvm.fma.*`` or
    ``llvm.fmuladd.*`` declared in the module (each name stands once in its
    string table, so this counts the intrinsics used, not the calls).
    """
    import re

    if b".version" in binary[:4096] and b".target" in binary[:4096]:
        text = binary.decode(errors="replace")
        start = text.find(f".entry {kernel}(")
        if start >= 0:
            following = text.find(".entry ", start + 1)
            text = text[start:following if following > 0 else len(text)]
        return len(re.findall(r"\b(?:fma|mad)\.rn(?:\.ftz)?(?:\.sat)?\.(?:f16|f16x2|bf16|f32|f64)\b", text))
    if b"BC\xc0\xde" in binary or b"\xde\xc0\x17\x0b" in binary:
        return len(re.findall(rb"llvm\.(?:fma|fmuladd)\.", binary))
    return None
