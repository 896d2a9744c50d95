"""hwinfo: cache hints from a fake and the real sysfs, cpu model, usable cpus, aggregate capacity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ert.hardware.hwinfo import (
    CacheInfo,
    aggregate_capacity_bytes,
    cpu_model,
    parse_cpu_list,
    parse_size_bytes,
    read_cpu_caches,
    usable_cpus,
)

KiB, MiB = 1024, 1024**2
REAL_SYSFS = "/sys/devices/system/cpu"


def fake_index(root: Path, n: int, **files: str) -> None:
    d = root / "cpu0" / "cache" / f"index{n}"
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name).write_text(text + "\n")


def zen4_sysfs(root: Path) -> Path:
    fake_index(root, 0, level="1", type="Data", size="32K", shared_cpu_list="0")
    fake_index(root, 1, level="1", type="Instruction", size="32K", shared_cpu_list="0")
    fake_index(root, 2, level="2", type="Unified", size="1024K", shared_cpu_list="0")
    fake_index(root, 3, level="3", type="Unified", size="32768K", shared_cpu_list="0-1")
    return root


def test_fake_sysfs_is_read_and_instruction_caches_skipped(tmp_path):
    caches = read_cpu_caches(str(zen4_sysfs(tmp_path)))
    assert caches == [
        CacheInfo(level=1, kind="Data", size_bytes=32 * KiB, shared_cpu_count=1),
        CacheInfo(level=2, kind="Unified", size_bytes=1 * MiB, shared_cpu_count=1),
        CacheInfo(level=3, kind="Unified", size_bytes=32 * MiB, shared_cpu_count=2),
    ]


def test_fake_sysfs_variants(tmp_path):
    # Index order on disk is not level order; "2M" suffixes; a cpu mask instead of a list;
    # unreadable or junk entries are skipped rather than fatal.
    fake_index(tmp_path, 10, level="3", type="Unified", size="260M", shared_cpu_list="0-3,8-11")
    fake_index(tmp_path, 2, level="2", type="Unified", size="2M", shared_cpu_map="00000000,00000003")
    fake_index(tmp_path, 0, level="1", type="Data", size="48K")
    fake_index(tmp_path, 3, level="x", type="Unified", size="1M", shared_cpu_list="0")
    fake_index(tmp_path, 4, level="4", type="Unified", size="lots", shared_cpu_list="0")
    fake_index(tmp_path, 5, level="4", type="Unified")
    (tmp_path / "cpu0" / "cache" / "uevent").write_text("")
    assert read_cpu_caches(str(tmp_path)) == [
        CacheInfo(level=1, kind="Data", size_bytes=48 * KiB, shared_cpu_count=1),
        CacheInfo(level=2, kind="Unified", size_bytes=2 * MiB, shared_cpu_count=2),
        CacheInfo(level=3, kind="Unified", size_bytes=260 * MiB, shared_cpu_count=8),
    ]


def test_missing_sysfs_gives_no_caches(tmp_path):
    assert read_cpu_caches(str(tmp_path / "nothing-here")) == []
    (tmp_path / "cpu0").mkdir()
    assert read_cpu_caches(str(tmp_path)) == []


def test_real_sysfs():
    caches = read_cpu_caches()
    assert all(isinstance(c, CacheInfo) and c.size_bytes > 0 and c.shared_cpu_count >= 1 for c in caches)
    assert all(c.kind != "Instruction" for c in caches)
    if not Path(REAL_SYSFS, "cpu0", "cache").is_dir():
        pytest.skip("this machine exposes no cache sysfs")
    assert any(c.level == 1 for c in caches)
    assert [c.level for c in caches] == sorted(c.level for c in caches)


def test_parse_size_and_cpu_list():
    assert parse_size_bytes("32K") == 32 * KiB
    assert parse_size_bytes("32768K") == 32 * MiB
    assert parse_size_bytes("2M") == 2 * MiB
    assert parse_size_bytes("1G") == 1024 * MiB
    assert parse_size_bytes("4096") == 4096
    for bad in ("", "K", "2X", "-1K", "1.5M"):
        with pytest.raises(ValueError):
            parse_size_bytes(bad)
    assert parse_cpu_list("0") == [0]
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("") == []
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")


def test_aggregate_capacity():
    l1 = CacheInfo(level=1, kind="Data", size_bytes=32 * KiB, shared_cpu_count=1)
    l3 = CacheInfo(level=3, kind="Unified", size_bytes=32 * MiB, shared_cpu_count=8)
    assert aggregate_capacity_bytes(l1, 2) == 64 * KiB
    assert aggregate_capacity_bytes(l1, 16) == 512 * KiB
    assert aggregate_capacity_bytes(l3, 1) == 32 * MiB
    assert aggregate_capacity_bytes(l3, 8) == 32 * MiB
    assert aggregate_capacity_bytes(l3, 9) == 64 * MiB
    # Only the instances that exist count.
    assert aggregate_capacity_bytes(l3, 64, cpus=16) == 64 * MiB
    assert aggregate_capacity_bytes(l1, 8, cpus=4) == 128 * KiB
    with pytest.raises(ValueError):
        aggregate_capacity_bytes(l1, 0)


@pytest.mark.parametrize("text, model", [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n",
     "AMD EPYC 9R14 96-Core Processor"),
    ("processor\t: 0\nBogoMIPS\t: 50.00\nHardware\t: BCM2835\n", "BCM2835"),      # ARM kernels
    ("cpu model\t\t: R4000\nmodel name\t: \n", "R4000"),                           # an empty field is skipped
])
def test_cpu_model_reads_the_first_named_field(tmp_path, text, model):
    info = tmp_path / "cpuinfo"
    info.write_text(text)
    assert cpu_model(str(info)) == model


def test_cpu_model_falls_back_to_the_platform_module(tmp_path, monkeypatch):
    import platform

    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    assert cpu_model(str(tmp_path / "missing")) == "riscv64"
    (tmp_path / "cpuinfo").write_text("processor\t: 0\n")  # no name in the file either
    assert cpu_model(str(tmp_path / "cpuinfo")) == "riscv64"
    monkeypatch.setattr(platform, "machine", lambda: "")
    assert cpu_model(str(tmp_path / "missing")) == ""


def test_usable_cpus_is_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert usable_cpus() == 3

    def refused(pid):
        raise OSError("not permitted")

    monkeypatch.setattr(os, "sched_getaffinity", refused, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    assert usable_cpus() == 7
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert usable_cpus() == 1
