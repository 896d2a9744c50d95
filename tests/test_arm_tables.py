"""ert's Arm tables checked against real machines' own descriptions (tests/data/arm/, sources in its README):
each core named from its MIDR as lscpu names it, its caches as lscpu sums them, and its rated fp64 peak and L1
bandwidth derived from Arm's and Fujitsu's pipe widths and checked against the published figures; and how ert
tells an emulated CPU (qemu-user) from a real one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ert.hardware import arm, cpu, hwinfo

DATA = Path(__file__).parent / "data" / "arm"
MACHINES = ("grace", "graviton3", "altra", "a64fx")
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def lscpu(machine: str) -> dict[str, str]:
    """``lscpu.txt`` as {field: value}; the cache lines under 'Caches (sum of all)' keyed 'L1d cache' etc."""
    out = {}
    for line in (DATA / machine / "lscpu.txt").read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            key = key.strip()
            out[key + " cache" if re.fullmatch(r"L\d[di]?", key) else key] = value.strip()
    return out


def lscpu_total_bytes(text: str) -> tuple[int, int | None]:
    """('4.5 MiB (72 instances)') -> (total bytes, instances or None)."""
    m = re.match(r"([\d.]+)\s*(KiB|MiB|GiB)(?:\s*\((\d+) instances?\))?", text)
    assert m, text
    return round(float(m.group(1)) * UNITS[m.group(2)]), (int(m.group(3)) if m.group(3) else None)


@pytest.fixture(scope="module", params=MACHINES)
def machine(request):
    return request.param, hwinfo.describe_arm(DATA / request.param), lscpu(request.param)


# --------------------------------------------------------------------------- naming and caches, against lscpu
def test_the_core_is_named_from_its_midr_as_lscpu_names_it(machine):
    name, desc, ls = machine
    expected = {"grace": ("Neoverse V2", 0x41, 0xD4F), "graviton3": ("Neoverse V1", 0x41, 0xD40),
                "altra": ("Neoverse N1", 0x41, 0xD0C), "a64fx": ("A64FX", 0x46, 0x001)}[name]
    assert (desc.cpu.core, desc.cpu.implementer, desc.cpu.part) == expected
    assert desc.cpu.core == ls["Model name"].replace("-", " ")
    assert desc.cpu.cpus == int(ls["CPU(s)"])
    assert list(desc.cpu.features) == ls["Flags"].split()
    stepping = ls["Stepping"]
    assert stepping in (f"r{desc.cpu.variant}p{desc.cpu.revision}", f"0x{desc.cpu.variant:x}")
    # The row of ert's table the MIDR leads to, and the name hwinfo gives the run's metadata.
    assert cpu.TABLE[desc.cpu.table_key].name == desc.cpu.core
    assert hwinfo.cpu_model(str(DATA / name / "proc/cpuinfo")) == desc.cpu.core


def test_caches_read_from_sysfs_add_up_to_lscpus_sums(machine):
    name, desc, ls = machine
    levels = {(c.level, c.kind): c for c in desc.caches}
    assert set(levels) >= {(1, "Data"), (2, "Unified")}
    for (level, kind), cache in levels.items():
        key = f"L{level}{'d' if kind == 'Data' else ''} cache"
        total, instances = lscpu_total_bytes(ls[key])
        count = desc.cpu.cpus // cache.shared_cpu_count
        assert cache.size_bytes * count == total, (key, cache)
        assert instances in (None, count), (key, instances, count)
    l1 = levels[(1, "Data")]
    assert (l1.size_bytes, l1.shared_cpu_count) == (64 * 1024, 1)
    assert l1.line_bytes == (256 if name == "a64fx" else 64)
    assert arm.emulation(machine="aarch64", cpuinfo=(DATA / name / "proc/cpuinfo").read_text()) == ""


# --------------------------------------------------------------------------- rated values, against published figures
def _rated(name: str, clock_ghz: float, cores: int | None = None) -> dict:
    return arm.rated_from_description(hwinfo.describe_arm(DATA / name), clock_ghz=clock_ghz, clock_how="stated",
                                      cores=cores)


def test_grace_fp64_peak_is_4_x_128_bit_fma_pipes_and_nvidias_7_1_tflops():
    """NVIDIA: Grace CPU Superchip (2 x 72 Neoverse V2 cores, '4x128b SVE2') FP64 peak 7.1 TFLOPS; 3.1 GHz."""
    one = _rated("grace", 3.1, cores=1)
    peak = arm.rated_value(one)
    assert peak["flops_per_cycle_per_core"] == 16     # 2 fp64 lanes x 4 pipes x 2
    assert peak["gflops_per_s"] == pytest.approx(49.6)
    assert "4 x 128-bit NEON/SVE2 FP pipes" in peak["derivation"] and "2 lanes x 4 FMA unit(s) x 2" in peak["derivation"]
    socket = arm.rated_value(_rated("grace", 3.1))       # the fixture's 72 cores: one Grace (a GH200's CPU)
    assert socket["gflops_per_s"] == pytest.approx(3571.2)
    superchip = arm.rated_value(_rated("grace", 3.1, cores=144))
    assert superchip["gflops_per_s"] == pytest.approx(7100, rel=0.01)
    # The fixture's own clock (cpufreq's 3447 MHz, the single-core maximum) is what ert uses without a stated one.
    own = arm.rated_value(arm.rated_from_description(hwinfo.describe_arm(DATA / "grace")))
    assert own["gflops_per_s"] == pytest.approx(72 * 3.447 * 16, abs=0.1) and "cpuinfo_max_freq" in own["derivation"]


def test_a64fx_fp64_peak_is_2_x_512_bit_sve_and_fugakus_3_38_tflops():
    """Fujitsu: A64FX (48 compute cores, 2 x 512-bit SVE FMA pipes) 3.3792 TFLOPS FP64 at 2.2 GHz (FX1000)."""
    one = arm.rated_value(_rated("a64fx", 2.2, cores=1))
    assert one["flops_per_cycle_per_core"] == 32      # 8 fp64 lanes x 2 pipes x 2
    assert one["gflops_per_s"] == pytest.approx(70.4)
    assert "2 x 512-bit SVE FMA pipes" in one["derivation"]
    assert arm.rated_value(_rated("a64fx", 2.2))["gflops_per_s"] == pytest.approx(3379.2)


@pytest.mark.parametrize("name, clock, cores, per_cycle, socket_gflops", [
    # AWS Graviton 3: 64 Neoverse V1 cores at 2.6 GHz; 2 x 256-bit SVE = 4 x 128-bit NEON = 16 FP64 FLOP/cycle.
    ("graviton3", 2.6, 64, 16, 2662.4),
    # Ampere Altra Q80-30: 80 Neoverse N1 cores at 3.0 GHz; 2 x 128-bit NEON = 8 FP64 FLOP/cycle.
    ("altra", 3.0, 80, 8, 1920.0),
])
def test_neoverse_v1_and_n1_fp64_peaks(name, clock, cores, per_cycle, socket_gflops):
    peak = arm.rated_value(_rated(name, clock, cores=cores))
    assert peak["flops_per_cycle_per_core"] == per_cycle
    assert peak["gflops_per_s"] == pytest.approx(socket_gflops)
    assert peak["derivation"].startswith(f"{cores} core(s) x {clock:.2f} GHz (stated) x {per_cycle} FP64")


@pytest.mark.parametrize("name, ro, rw, how", [
    # Neoverse V2 and V1: 3 x 16 B loads, 2 x 16 B stores per cycle.
    ("grace", 48, 64, "min(48, 32)"),
    ("graviton3", 48, 64, "min(48, 32)"),
    # Neoverse N1: 2 x 16 B loads, one 16 B store per cycle.
    ("altra", 32, 32, "min(32, 16)"),
    # A64FX: 2 x 64 B loads or one 64 B store per cycle.
    ("a64fx", 128, 128, "min(128, 64)"),
])
def test_l1_bandwidth_per_core_with_its_derivation(name, ro, rw, how):
    rated = _rated(name, 2.0, cores=1)
    read_only, read_write = arm.rated_value(rated, level="L1", access="ro"), arm.rated_value(rated, level="L1")
    assert (read_only["bytes_per_cycle_per_core"], read_write["bytes_per_cycle_per_core"]) == (ro, rw)
    assert read_only["gbytes_per_s"] == pytest.approx(2.0 * ro) and how in read_write["derivation"]


def test_a_core_ert_does_not_rate_is_still_named_and_says_why():
    text = (DATA / "grace" / "proc/cpuinfo").read_text().replace("0xd4f", "0xd84")  # a Neoverse V3
    desc = arm.Description(cpu=arm.parse_cpuinfo(text))
    assert desc.cpu.core == "Neoverse V3" and desc.cpu.table_key is None
    peak = arm.rated_value(arm.rated_from_description(desc, clock_ghz=3.0))
    assert peak["gflops_per_s"] is None
    assert peak["derivation"] == ("no rated value: Neoverse V3 (implementer 0x41, part 0xd84, r0p0) is not in "
                                  "ert's table")
    unknown = arm.parse_cpuinfo(text.replace("0x41", "0x99"))
    assert unknown.core == "implementer 0x99 part 0xd84"


# --------------------------------------------------------------------------- emulation
def test_an_arm_process_on_an_x86_kernel_is_emulated():
    """qemu-user (the arm64 rig): the process is aarch64, the kernel's /proc/cpuinfo is the x86 host's."""
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2\n"
    why = arm.emulation(machine="aarch64", cpuinfo=x86)
    assert why.startswith("an aarch64 process on a kernel whose /proc/cpuinfo describes AuthenticAMD, AMD EPYC "
                          "9R14") and "qemu-user" in why
    assert arm.emulation(machine="x86_64", cpuinfo=x86) == ""


def test_qemus_own_cpu_and_an_x86_process_on_arm_are_emulated():
    grace = (DATA / "grace" / "proc/cpuinfo").read_text()
    assert arm.emulation(machine="aarch64", cpuinfo=grace) == ""
    qemu_max = grace.replace("CPU implementer\t: 0x41", "CPU implementer\t: 0x00")
    assert "implementer is 0x00" in arm.emulation(machine="aarch64", cpuinfo=qemu_max)
    assert "describes an Arm CPU" in arm.emulation(machine="x86_64", cpuinfo=grace)


def test_cpu_isa_is_empty_off_arm():
    """On this machine's own process (x86 here), no Arm metadata; the rig's run records it (test_arm_rig.py)."""
    import platform

    if platform.machine().lower() in ("aarch64", "arm64"):
        pytest.skip("this process is an Arm one")
    assert arm.cpu_isa(128) == {} and arm.sve_vector_bits() is None


def test_the_rig_script_passes_shellcheck():
    """jobs/arm64-rig.sh mounts, chroots and deletes as root: shellcheck's warnings are bugs there."""
    import shutil
    import subprocess

    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian: apt-get install shellcheck)")
    script = Path(__file__).resolve().parents[1] / "jobs" / "arm64-rig.sh"
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
