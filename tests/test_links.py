"""Transfer levels' shared host logic (ert/backends/links.py): the pattern and its check, records, checks, rated PCIe/C2C/NVLink, sysfs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ert.hardware import links as hw_links
from ert.backends import links
from ert.measure import transfers as stage
from ert.records.rawio import transfer_gbytes_per_s, transfer_latency_us, transfer_record


def test_record_follows_the_contract_and_its_rate_and_latency():
    r = transfer_record(level="link-bidir", kind="link", variant="pinned", method="m", nbytes=1 << 20,
                        moved_bytes=2 << 20, repeats=10, samples=[0.002, 0.0021, 0.0025], valid=True,
                        check="ok", noise_threshold=0.10)
    assert r["id"] == "link-bidir:pinned:1048576" and r["type"] == "transfer"
    assert r["seconds"] == {"min": 0.002, "median": 0.0021, "max": 0.0025}
    assert math.isclose(r["spread"], 0.25) and r["noisy"]
    # 2 MiB moved x 10 repeats in 2 ms (best sample)
    assert math.isclose(transfer_gbytes_per_s(r), (2 << 20) * 10 / 0.002 / 1e9)
    assert math.isclose(transfer_latency_us(r), 210.0)
    peer = transfer_record(level="peer-d2d", kind="peer", variant="p2p", method="m", nbytes=4096,
                           moved_bytes=4096, repeats=1, samples=[1e-5], valid=True, check="ok", pair=(0, 1),
                           peer_access=True, noise_threshold=0.10)
    assert peer["id"] == "peer-d2d:p2p:0-1:4096" and peer["pair"] == [0, 1] and peer["peer_access"] is True
    assert not peer["noisy"] and peer["spread"] == 0


def test_compare_names_the_first_wrong_byte():
    src = links.pattern(1000)
    assert src.size == 1000 and len(set(src[:8 * 100].view(np.uint64).tolist())) == 100
    ok, text = links.compare(src.copy(), src, what="x")
    assert ok and "all 1000 bytes" in text
    bad = src.copy()
    bad[777] ^= 1
    ok, text = links.compare(bad, src, what="x")
    assert not ok and "byte 777 of 1000" in text


class _HostCopy:
    """A Transfer between two numpy arrays on this host (a real copy, timed by the wall clock)."""

    level, kind, variant, method, directions = "link-h2d", "link", "copy", "numpy copy", 1

    def __init__(self, *, broken=False):
        self.extra = {"transport": "host memory"}
        self.src = links.pattern(1 << 16).copy()
        self.dst = np.zeros_like(self.src)
        self.broken, self.prepared = broken, []

    def prepare(self, nbytes):
        self.n = nbytes
        self.prepared.append(nbytes)
        self.dst[:nbytes] = links.POISON_BYTE

    def time(self, count):
        import time

        start = time.perf_counter()
        for _ in range(count):
            if not self.broken:
                np.copyto(self.dst[:self.n], self.src[:self.n])
        return time.perf_counter() - start

    def check(self):
        return links.compare(self.dst[:self.n], self.src[:self.n], what="dst")


def test_measure_transfers_emits_in_size_order_skips_known_ids_and_flags_a_failed_check():
    good, broken = _HostCopy(), _HostCopy(broken=True)
    broken.variant = "broken"
    out = []
    n = stage.measure_transfers([good, broken], [16384, 4096, 65536], min_seconds=1e-4, samples=3,
                                noise_threshold=10.0, max_remeasure=1, emit=out.append,
                                skip={"link-h2d:copy:16384"})
    assert n == 5 and [r["bytes"] for r in out] == [4096, 4096, 16384, 65536, 65536]
    assert good.prepared == [4096, 65536]
    assert all(r["valid"] for r in out if r["variant"] == "copy")
    assert not any(r["valid"] for r in out if r["variant"] == "broken")
    assert all(len(r["samples"]) == 3 and r["repeats"] >= 1 and r["transport"] == "host memory" for r in out)
    assert all(r["seconds"]["min"] * 1 <= r["seconds"]["max"] for r in out)


@pytest.mark.parametrize("gen,lanes,expected", [(3, 16, 15.75), (4, 16, 31.51), (5, 16, 63.02), (2, 8, 4.0),
                                                (6, 16, 121.0)])
def test_pcie_rated_per_direction_and_both(gen, lanes, expected):
    rated = hw_links.pcie_rated(generation=gen, lanes=lanes, source="test")
    assert rated["link-h2d"]["gbytes_per_s"] == pytest.approx(expected, abs=0.01)
    assert rated["link-bidir"]["gbytes_per_s"] == pytest.approx(2 * expected, abs=0.02)
    assert f"PCIe Gen{gen} x{lanes}" in rated["link-d2h"]["derivation"]
    assert hw_links.pcie_rated(generation=9, lanes=16, source="t")["link-h2d"]["gbytes_per_s"] is None


def test_c2c_and_nvlink_rated():
    c2c = hw_links.c2c_rated(source="GH200")
    assert c2c["link-h2d"]["gbytes_per_s"] == 450 and c2c["link-bidir"]["gbytes_per_s"] == 900


def test_nvlink_rated_by_nvmls_version_enum_with_the_datasheet_totals():
    """NVML answers nvmlNvlinkVersion_t: the enum values are pynvml's own constants, not generations."""
    pynvml = pytest.importorskip("pynvml")
    # (enum, links, the datasheet's bidirectional total in GB/s): per direction is half of it.
    for enum, count, total in ((pynvml.NVML_NVLINK_VERSION_2_0, 6, 300),   # V100
                               (pynvml.NVML_NVLINK_VERSION_3_0, 12, 600),  # A100
                               (pynvml.NVML_NVLINK_VERSION_3_1, 12, 600),  # A100 as NVML reports it
                               (pynvml.NVML_NVLINK_VERSION_4_0, 18, 900),  # H100 SXM
                               (pynvml.NVML_NVLINK_VERSION_5_0, 18, 1800)):  # B200
        rated = hw_links.nvlink_rated(version=enum, links=count, source="t")
        assert rated["gbytes_per_s"] == pytest.approx(total / 2), (enum, rated)
        assert f"{count} links" in rated["derivation"] and "datasheet" in rated["derivation"]
    assert "NVLink 4.0 (NVML version enum 6)" in hw_links.nvlink_rated(version=6, links=18, source="t")["derivation"]
    # An RTX A6000 / GeForce RTX 3090 bridge reports NVLink 3.x too: 4 links, 112.5 GB/s in total.
    bridge = hw_links.nvlink_rated(version=pynvml.NVML_NVLINK_VERSION_3_1, links=4, source="t",
                                   device_name="NVIDIA GeForce RTX 3090")
    assert bridge["gbytes_per_s"] == pytest.approx(112.5 / 2) and "RTX A6000 datasheet" in bridge["derivation"]
    for enum in (pynvml.NVML_NVLINK_VERSION_INVALID, pynvml.NVML_NVLINK_VERSION_6_0, 99):
        rated = hw_links.nvlink_rated(version=enum, links=2, source="t")
        assert rated["gbytes_per_s"] is None and "no rate in the table" in rated["derivation"]
    assert hw_links.nvlink_rated(version=6, links=0, source="t")["gbytes_per_s"] is None
    # Every enum value in the table is one of pynvml's NVML_NVLINK_VERSION_* and names that version.
    constants = {getattr(pynvml, n): n for n in dir(pynvml) if n.startswith("NVML_NVLINK_VERSION_")}
    for enum, (label, _, _) in hw_links.NVLINK_VERSIONS.items():
        assert constants[enum] == "NVML_NVLINK_VERSION_" + label.replace(".", "_"), (enum, label)


def test_link_speed_parsing_and_generations():
    assert hw_links.parse_link_speed("32.0 GT/s PCIe") == 32.0
    assert hw_links.parse_link_speed("8 GT/s") == 8.0
    assert hw_links.parse_link_speed("Unknown") is None
    assert [hw_links.pcie_generation(x) for x in (2.5, 5, 8, 16, 32, 64, 3.3)] == [1, 2, 3, 4, 5, 6, None]


def _fake_pci(root, *, current=("2.5 GT/s PCIe", "16"), maximum=("32.0 GT/s PCIe", "16"),
              upstream=("16.0 GT/s PCIe", "16")):
    """A sysfs-shaped tree: the GPU below its bridge port, linked from devices/ as the kernel does."""
    port = root / "pci0000:00" / "0000:00:01.0"
    gpu = port / "0000:17:00.0"
    gpu.mkdir(parents=True)
    for where, (speed, width) in ((gpu, maximum), (port, upstream)):
        (where / "max_link_speed").write_text(speed + "\n")
        (where / "max_link_width").write_text(width + "\n")
    (gpu / "current_link_speed").write_text(current[0] + "\n")
    (gpu / "current_link_width").write_text(current[1] + "\n")
    devices = root / "devices"
    devices.mkdir()
    (devices / "0000:17:00.0").symlink_to(gpu)
    return devices


def test_sysfs_link_uses_the_slower_of_device_and_slot_and_names_an_idle_downtrain(tmp_path):
    devices = _fake_pci(tmp_path)
    rated = hw_links.pcie_rated_from_sysfs("0000:17:00.0", root=devices)
    # A Gen5 GPU in a Gen4 slot, idling at Gen1: Gen4 x16.
    assert rated["link-h2d"]["gbytes_per_s"] == pytest.approx(31.51, abs=0.01)
    assert "upstream port" in rated["link-h2d"]["derivation"] and "2.5 GT/s x16" in rated["link-h2d"]["derivation"]
    assert hw_links.pcie_rated_from_sysfs("0000:99:00.0", root=devices)["link-h2d"]["derivation"].startswith(
        "no rated value: PCI device 0000:99:00.0 is not in")
    assert "PCI address is unknown" in hw_links.pcie_rated_from_sysfs(None)["link-bidir"]["derivation"]


def test_sysfs_of_this_machine_is_read_without_error():
    # Whatever the real sysfs holds here (a KVM guest), the answer is a rated value or a reason.
    import os

    root = "/sys/bus/pci/devices"
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    for name in names[:5]:
        entry = hw_links.pcie_rated_from_sysfs(name)["link-h2d"]
        assert entry["gbytes_per_s"] is None or entry["gbytes_per_s"] > 0, entry
        assert entry["derivation"]


def test_host_copy_reference_is_a_positive_rate():
    ref = stage.host_copy_reference(1 << 20, min_seconds=0.002, samples=2)
    assert ref["bytes"] == 1 << 20 and ref["gbytes_per_s"] > 0.5
