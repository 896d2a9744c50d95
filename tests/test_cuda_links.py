"""CUDA link and peer levels (ert/backends/cuda_links.py, ert/analysis/transfers.py): host logic here, GPU tests marked.

The host logic runs on emulated topologies (there are not two GPUs here):
which ordered pairs and peer-access states are measured, NVLink counts from
NVML-shaped answers, rated links (C2C, PCIe from NVML or sysfs, NVLink per
pair), and the peer matrix and best pair built from transfer records.  The
``gpu`` tests are written to run unchanged on a GPU machine (one GPU; the
peer ones need two) and are skipped here with the reason.
"""

from __future__ import annotations

import pytest

from ert.hardware import links as hw_links
from ert.analysis import transfers
from ert.backends import cuda as cuda_mod
from ert.backends import cuda_links as cl
from ert.measure import transfers as stage
from ert.rawio import transfer_gbytes_per_s, transfer_latency_us, transfer_record
from ert.backends import links

_OK, _REASON, _DETAIL = cuda_mod.probe()


def needs_gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not _OK, reason=f"needs an NVIDIA GPU; the cuda backend says: "
                                                              f"{_REASON}")(test))


def needs_two_gpus(test):
    why = _REASON or f"it sees {_DETAIL.get('devices')} GPU(s)"
    return pytest.mark.gpu(pytest.mark.skipif(not _OK or _DETAIL.get("devices", 0) < 2,
                                              reason=f"needs two NVIDIA GPUs; the cuda backend says: {why}")(test))


def _dgx_like(n=4):
    """n GPUs, all peers, NVLink 4 x 18 between 0 and 1, PCIe elsewhere; 3 cannot reach 0 as a peer."""
    can = [[a != b for b in range(n)] for a in range(n)]
    can[3][0] = False
    link = [["self" if a == b else "PCIe" for b in range(n)] for a in range(n)]
    nvlinks = [[0] * n for _ in range(n)]
    for a, b in ((0, 1), (1, 0)):
        link[a][b], nvlinks[a][b] = "NVLink", 18
    return cl.PeerTopology(devices=list(range(n)), can_access=can, link=link, nvlinks=nvlinks, nvlink_version=4)


def test_peer_plan_every_ordered_pair_off_and_on_where_peers():
    topo = _dgx_like()
    plan = cl.peer_plan(topo)
    assert len({(a, b) for a, b, _ in plan}) == 12
    assert sum(1 for *_, on in plan if not on) == 12 and sum(1 for *_, on in plan if on) == 11
    assert (3, 0, True) not in plan and (0, 3, True) in plan and (3, 0, False) in plan
    assert cl.peer_plan(cl.PeerTopology(devices=[0], can_access=[[False]])) == []
    with pytest.raises(ValueError):
        cl.PeerTopology(devices=[0, 1], can_access=[[False]])


def test_peer_rated_takes_the_best_pair_and_says_why_for_each():
    host = hw_links.pcie_rated(generation=5, lanes=16, source="t")["link-h2d"]
    rated = cl.peer_rated(_dgx_like(), host_rated=host)
    assert rated["gbytes_per_s"] == 450 and "best pair 0->1: NVLink 4: 18 links" in rated["derivation"]
    by_pair = {tuple(p["pair"]): p for p in rated["pairs"]}
    assert by_pair[(2, 3)]["gbytes_per_s"] == pytest.approx(63.02, abs=0.01)
    assert "over PCIe" in by_pair[(2, 3)]["derivation"]
    unknown = cl.PeerTopology(devices=[0, 1], can_access=[[False, True], [True, False]])
    assert cl.peer_rated(unknown)["gbytes_per_s"] is None
    assert "link between GPUs 0 and 1 is unknown" in cl.peer_rated(unknown)["derivation"]


def test_nvlink_counts_from_nvml_shaped_link_states():
    bus = ["00000000:18:00.0", "00000000:2A:00.0", "0000:3a:00.0"]
    states = ([{"link": i, "active": True, "remote_bus_id": "00000000:2A:00.0"} for i in range(4)]
              + [{"link": 4, "active": False, "remote_bus_id": "0000:3A:00.0"},
                 {"link": 5, "active": True, "remote_bus_id": "0000003a:00:00.0"}])
    assert cl.nvlink_counts(states, bus) == [0, 4, 0]
    # Links to NVSwitches reach every GPU.
    switched = [{"link": i, "active": True, "remote_bus_id": "00000000:C0:00.0", "remote_is_switch": True}
                for i in range(18)]
    assert cl.nvlink_counts(switched, bus) == [18, 18, 18]


class _Runtime:
    """cudaDeviceCanAccessPeer of an emulated node."""

    def __init__(self, can):
        self.can = can

    def deviceCanAccessPeer(self, a, b):
        return int(self.can[a][b])


def test_read_topology_from_the_runtime_and_nvml():
    bus = ["0000:18:00.0", "0000:2a:00.0"]
    nvml = [{"nvlinks": [{"active": True, "remote_bus_id": "00000000:2A:00.0", "version": 4}] * 6},
            {"nvlinks": [{"active": True, "remote_bus_id": "00000000:18:00.0", "version": 4}] * 6}]
    topo = cl.read_topology(_Runtime([[0, 1], [1, 0]]), bus_ids=bus, nvml=nvml)
    assert topo.can_access == [[False, True], [True, False]]
    assert topo.link == [["self", "NVLink"], ["NVLink", "self"]] and topo.nvlinks[0][1] == 6
    assert cl.peer_rated(topo)["gbytes_per_s"] == 150
    pcie = cl.read_topology(_Runtime([[0, 0], [0, 0]]), bus_ids=bus, nvml=[{}, {}])
    assert pcie.link[0][1] == "PCIe" and cl.peer_plan(pcie) == [(0, 1, False), (1, 0, False)]


def test_link_rated_c2c_nvml_and_sysfs(tmp_path):
    gh = cl.link_rated_of(name="NVIDIA GH200 480GB", nvml_link={}, pci_bus_id="")
    assert gh["link-h2d"]["gbytes_per_s"] == 450 and "NVLink-C2C" in gh["link-d2h"]["derivation"]
    h100 = cl.link_rated_of(name="NVIDIA H100 PCIe", pci_bus_id="0000:17:00.0",
                            nvml_link={"current_generation": 1, "current_width": 16, "max_generation": 5,
                                       "max_width": 16})
    assert h100["link-h2d"]["gbytes_per_s"] == pytest.approx(63.02, abs=0.01)
    assert "NVML maximum" in h100["link-h2d"]["derivation"] and "current Gen1 x16" in h100["link-h2d"]["derivation"]
    assert h100["link-bidir"]["gbytes_per_s"] == pytest.approx(126.03, abs=0.02)
    nothing = cl.link_rated_of(name="Tesla V100", nvml_link={}, pci_bus_id="", sysfs_root=str(tmp_path))
    assert nothing["link-h2d"]["gbytes_per_s"] is None and "PCI address is unknown" in nothing["link-h2d"]["derivation"]


def _rec(a, b, nbytes, seconds, *, on=True):
    return transfer_record(level="peer-d2d", kind="peer", variant=cl.variant_of(on), method="m",
                           nbytes=nbytes, moved_bytes=nbytes, repeats=10, samples=[seconds, seconds * 1.01],
                           valid=True, check="ok", pair=(a, b), peer_access=on, noise_threshold=0.10)


def test_peer_matrix_and_best_pair_from_records():
    mib = 1 << 20
    records = []
    for (a, b), gbps in {(0, 1): 400.0, (1, 0): 380.0, (0, 2): 50.0, (2, 0): 52.0, (1, 2): 49.0}.items():
        for n, scale in ((mib, 0.5), (64 * mib, 1.0)):
            records.append(_rec(a, b, n, n * 10 / (gbps * scale * 1e9)))
        records.append(_rec(a, b, 64 * mib, 64 * mib * 10 / 20e9, on=False))
    records.append({**_rec(2, 1, 64 * mib, 1.0), "valid": False})
    valid = [r for r in records if r["valid"]]  # the analysis drops invalid records before pairing
    chosen, m = transfers.best_pair([r for r in valid if r["variant"] == "p2p"])
    assert m["devices"] == [0, 1, 2]
    assert m["gbytes_per_s"][0][1] == pytest.approx(400, rel=1e-3) and m["gbytes_per_s"][2][0] == pytest.approx(52)
    assert m["gbytes_per_s"][0][0] is None and m["gbytes_per_s"][2][1] is None  # the diagonal; an invalid record
    assert m["peer_access"][0][1] is True
    assert {tuple(r["pair"]) for r in chosen} == {(0, 1)} and sorted(r["bytes"] for r in chosen) == [mib, 64 * mib]
    _, staged = transfers.best_pair([r for r in valid if r["variant"] == "staged"])
    assert staged["gbytes_per_s"][1][0] == pytest.approx(20, rel=1e-3) and staged["peer_access"][1][0] is False
    # The whole path: records to the peer-d2d ceiling entries, one per variant, matrix attached.
    entries, _ = transfers.transfer_ceilings(records, {})
    by_variant = {e["variant"]: e for e in entries}
    assert by_variant["p2p"]["level"] == "peer-d2d" and by_variant["p2p"]["gbytes_per_s"] == pytest.approx(400, rel=1e-2)
    assert by_variant["p2p"]["matrix"]["gbytes_per_s"][1][0] == pytest.approx(380, rel=1e-3)


def test_the_cuda_link_code_imports_and_its_host_logic_runs_without_a_gpu():
    # Only CupyLinks and its transfers touch CuPy; constructing one here fails (no GPU), nothing else does.
    assert cl.variant_of(False) == "staged" and cl.LINK_LEVELS == ("link-h2d", "link-d2h", "link-bidir")
    from ert.backends import LinkBackend

    assert callable(cuda_mod.CudaBackend.link_transfers) and callable(cuda_mod.CudaBackend.link_rated)
    assert issubclass(cuda_mod.CudaBackend, LinkBackend)


# ----------------------------------------------------------------------------- on a GPU (never run yet)
@pytest.fixture(scope="module")
def gpu_links():
    backend = cuda_mod.create()
    records = []
    try:
        sizes = links.link_sizes(min_bytes=4096, max_bytes=256 << 20, per_octave=1)
        stage.measure_transfers(backend.link_transfers(max(sizes)), sizes, min_seconds=0.01, samples=3,
                                noise_threshold=0.10, max_remeasure=2, emit=records.append)
        rated = backend.link_rated(lambda: stage.host_copy_reference(64 << 20))
    finally:
        backend.close()
    return records, rated


def _largest(records, level, variant):
    chosen = [r for r in records if r["level"] == level and r["variant"] == variant]
    return transfer_gbytes_per_s(max(chosen, key=lambda r: r["bytes"]))


@needs_gpu
def test_gpu_link_plateaus_against_the_rated_link(gpu_links):
    records, rated = gpu_links
    assert records and all(r["valid"] for r in records), [r["check"] for r in records if not r["valid"]]
    for level in ("link-h2d", "link-d2h"):
        pinned, pageable = _largest(records, level, "pinned"), _largest(records, level, "pageable")
        assert pageable <= pinned * 1.05, (level, pageable, pinned)
        if rated[level]["gbytes_per_s"]:
            assert 0.6 * rated[level]["gbytes_per_s"] < pinned < rated[level]["gbytes_per_s"], (level, pinned, rated)
    bidir = _largest(records, "link-bidir", "pinned")
    assert bidir > max(_largest(records, "link-h2d", "pinned"), _largest(records, "link-d2h", "pinned")), bidir
    small = min((r for r in records if r["level"] == "link-h2d" and r["variant"] == "pinned"), key=lambda r: r["bytes"])
    assert 0.5 < transfer_latency_us(small) < 100, transfer_latency_us(small)


@needs_two_gpus
def test_gpu_peer_matrix_covers_every_pair(gpu_links):
    records, rated = gpu_links
    peers = [r for r in records if r["level"] == "peer-d2d"]
    assert peers and all(r["valid"] for r in peers)
    for variant in sorted({r["variant"] for r in peers}):
        chosen, matrix = transfers.best_pair([r for r in peers if r["variant"] == variant])
        n = len(matrix["devices"])
        assert all(matrix["gbytes_per_s"][a][b] for a in range(n) for b in range(n) if a != b), matrix
        if variant == "p2p" and rated["peer-d2d"]["gbytes_per_s"]:
            largest = max(chosen, key=lambda r: r["bytes"])
            assert transfer_gbytes_per_s(largest) < rated["peer-d2d"]["gbytes_per_s"]
