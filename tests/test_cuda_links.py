"""CUDA link and peer levels (ert/backends/cuda_links.py, cuda_copies.py, ert/analysis/transfers.py): host logic here, GPU tests marked.

The host logic runs on emulated topologies (there are not two GPUs here):
which ordered pairs and peer-access states are measured, NVLink counts from
NVML-shaped answers, rated links (C2C, PCIe from NVML or sysfs, NVLink per
pair), and the peer matrix and best pair built from transfer records.  The
``gpu`` tests are written to run unchanged on a GPU machine (one GPU; the
peer ones need two) and are skipped here with the reason.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ert.hardware import links as hw_links
from ert.analysis import transfers
from ert.backends import cuda as cuda_mod
from ert.backends import cuda_copies as cc
from ert.backends import cuda_links as cl
from ert.measure import transfers as stage
from ert.records.rawio import transfer_gbytes_per_s, transfer_latency_us, transfer_record
from ert.config.schema import TransferOptions

_OK, _REASON, _DETAIL = cuda_mod.probe()
pynvml = pytest.importorskip("pynvml")  # the installed nvidia-ml-py: its names and constants are the reference
ERT = Path(cl.__file__).resolve().parents[1]
GATE_FILE = Path(__file__).resolve().parents[1] / "kernels" / cc.GATE_KERNEL_FILE  # this checkout's, as ert.kernels


def needs_gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not _OK, reason=f"needs an NVIDIA GPU; the cuda backend says: "
                                                              f"{_REASON}")(test))


def needs_two_gpus(test):
    why = _REASON or f"it sees {_DETAIL.get('devices')} GPU(s)"
    return pytest.mark.gpu(pytest.mark.skipif(not _OK or _DETAIL.get("devices", 0) < 2,
                                              reason=f"needs two NVIDIA GPUs; the cuda backend says: {why}")(test))


def _dgx_like(n=4):
    """n GPUs, all peers, NVLink 4.0 x 18 between 0 and 1, PCIe elsewhere; 3 cannot reach 0 as a peer."""
    can = [[a != b for b in range(n)] for a in range(n)]
    can[3][0] = False
    link = [["self" if a == b else "PCIe" for b in range(n)] for a in range(n)]
    nvlinks = [[0] * n for _ in range(n)]
    for a, b in ((0, 1), (1, 0)):
        link[a][b], nvlinks[a][b] = "NVLink", 18
    return cl.PeerTopology(devices=list(range(n)), can_access=can, link=link, nvlinks=nvlinks,
                           nvlink_version=pynvml.NVML_NVLINK_VERSION_4_0)


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
    assert rated["gbytes_per_s"] == 450 and "best pair 0->1: NVLink 4.0 (NVML version enum 6): 18 links" \
        in rated["derivation"]
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
    v3 = pynvml.NVML_NVLINK_VERSION_3_0
    nvml = [{"nvlinks": [{"active": True, "remote_bus_id": "00000000:2A:00.0", "version": v3}] * 6},
            {"nvlinks": [{"active": True, "remote_bus_id": "00000000:18:00.0", "version": v3}] * 6}]
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
    # The current link's rate beside the maximum's (a VM's "maximum" may be a generation the slot never gives).
    assert h100["link-h2d"]["derivation"].endswith("; at the current link (Gen1 x16 when read): 4 GB/s per direction")
    assert h100["link-bidir"]["derivation"].endswith("(Gen1 x16 when read): 8 GB/s both ways")
    same = cl.link_rated_of(name="NVIDIA H100 PCIe", pci_bus_id="0000:17:00.0",
                            nvml_link={"current_generation": 5, "current_width": 16, "max_generation": 5,
                                       "max_width": 16})
    assert "at the current link" not in same["link-h2d"]["derivation"]
    nothing = cl.link_rated_of(name="Tesla V100", nvml_link={}, pci_bus_id="", sysfs_root=str(tmp_path))
    assert nothing["link-h2d"]["gbytes_per_s"] is None and "PCI address is unknown" in nothing["link-h2d"]["derivation"]


# ----------------------------------------------------------------------------- NVML: a stand-in and the real names
class _Nvml:
    """A stand-in for the pynvml module on an emulated node: the real module's names, constants, error class
    and structures; the GPUs' NVLinks as given.  ``links[bus]`` lists (remote bus id, version enum, remote is a
    switch) per link, ``broken`` names NVML functions that answer NVML_ERROR_NOT_SUPPORTED."""

    NVMLError = pynvml.NVMLError
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_DEVICE_TYPE_GPU = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH

    def __init__(self, links: dict, *, pcie=(5, 16), broken=()):
        self.links, self.pcie, self.broken = links, pcie, set(broken)

    def _answer(self, name, value):
        if name in self.broken:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _link(self, handle, link):
        if link >= len(self.links[handle]):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # past the GPU's last link
        return self.links[handle][link]

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId):
        return pciBusId.decode()

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return 1  # idle

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self.pcie[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self.pcie[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self.pcie[1]

    def nvmlDeviceGetC2cModeInfoV(self, handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkState(self, device, link):
        self._link(device, link)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device, link):
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._link(device, link)[0].encode()
        return self._answer("nvmlDeviceGetNvLinkRemotePciInfo", info)

    def nvmlDeviceGetNvLinkVersion(self, device, link):
        return self._answer("nvmlDeviceGetNvLinkVersion", self._link(device, link)[1])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        switch = self._link(handle, link)[2]
        return self._answer("nvmlDeviceGetNvLinkRemoteDeviceType", pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if switch
                            else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)


def test_the_nvml_stand_in_follows_the_installed_module():
    import inspect

    for name, value in vars(_Nvml).items():
        if name.startswith("NVML") and not callable(value):
            assert getattr(pynvml, name) == value, name
        elif name.startswith("nvml"):
            real = inspect.signature(getattr(pynvml, name))
            ours = inspect.signature(value)
            assert list(real.parameters) == list(ours.parameters)[1:], (name, real, ours)  # less self


def _nvml_names(tree) -> set[str]:
    """NVML names a module's code uses: attributes (pynvml.X, self._nvml.X) and strings given to getattr."""
    pattern = re.compile(r"(nvml[A-Z]\w*|NVML_[A-Z0-9_]+)")
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and pattern.fullmatch(node.attr):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.fullmatch(node.value):
            names.add(node.value)
    return names


def test_every_nvml_name_in_ert_exists_in_the_installed_pynvml():
    used = {}
    for path in sorted(ERT.rglob("*.py")):
        for name in _nvml_names(ast.parse(path.read_text(), str(path))):
            used.setdefault(name, []).append(str(path.relative_to(ERT.parent)))
    assert "nvmlDeviceGetNvLinkRemotePciInfo" in used and "nvmlDeviceGetNvLinkVersion" in used, sorted(used)
    missing = {name: where for name, where in used.items() if not hasattr(pynvml, name)}
    assert not missing, f"not in pynvml {getattr(pynvml, '__version__', '')}: {missing}"
    # The scan finds a wrong name (the one the NVLink code once called).
    assert _nvml_names(ast.parse("pynvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, 0)")) == \
        {"nvmlDeviceGetNvLinkRemotePciInfo_v2"}
    assert not hasattr(pynvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2")


_H100 = ["00000000:18:00.0", "00000000:2A:00.0"]


def _dgx_h100_nvml(**kw):
    """Two H100 SXM: 18 NVLink 4.0 links each, all to NVSwitches."""
    switch = ("00000000:C0:00.0", pynvml.NVML_NVLINK_VERSION_4_0, True)
    return _Nvml({bus: [switch] * 18 for bus in _H100}, **kw)


def test_nvlink_states_read_through_the_nvml_stand_in():
    states = list(cl._nvlink_states(_dgx_h100_nvml(), _H100[0]))
    assert len(states) == 18 and all(s["active"] and s["remote_is_switch"] for s in states)
    assert {s["version"] for s in states} == {pynvml.NVML_NVLINK_VERSION_4_0}
    assert states[0]["remote_bus_id"] == "00000000:C0:00.0"
    # A field NVML refuses is left out, and why is kept; the other fields still come.
    partial = list(cl._nvlink_states(_dgx_h100_nvml(broken={"nvmlDeviceGetNvLinkVersion"}), _H100[0]))
    assert "version" not in partial[0] and "Not Supported" in partial[0]["unread"]["version"]
    assert partial[0]["remote_bus_id"] == "00000000:C0:00.0"
    assert list(cl._nvlink_states(_Nvml({"x": []}), "x")) == []  # no NVLink
    # An nvidia-ml-py older than nvmlDeviceGetNvLinkRemoteDeviceType: the links are still counted.
    full = _dgx_h100_nvml()
    old = SimpleNamespace(**{name: getattr(full, name) for name in dir(full)
                             if name.startswith(("nvml", "NVML")) and name != "nvmlDeviceGetNvLinkRemoteDeviceType"})
    old.NVMLError = pynvml.NVMLError
    states = list(cl._nvlink_states(old, _H100[0]))
    assert len(states) == 18 and "AttributeError" in states[0]["unread"]["remote_is_switch"]
    assert states[0]["version"] == pynvml.NVML_NVLINK_VERSION_4_0


def test_h100_and_a100_and_rtx_nodes_rated_from_nvml_through_the_whole_read(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _dgx_h100_nvml())
    nvml = [cl.read_nvml_link(b) for b in _H100]
    assert all("error" not in n and len(n["nvlinks"]) == 18 for n in nvml), nvml
    assert nvml[0]["max_generation"] == 5 and nvml[0]["current_generation"] == 1
    topo = cl.read_topology(_Runtime([[0, 1], [1, 0]]), bus_ids=_H100, nvml=nvml, names=["NVIDIA H100 80GB HBM3"] * 2)
    assert topo.link[0][1] == "NVLink" and topo.nvlinks[0][1] == 18
    rated = cl.peer_rated(topo)
    assert rated["gbytes_per_s"] == 450 and "NVLink 4.0" in rated["derivation"]  # 900 GB/s in total
    # A100 (NVML says 3.1): 12 links to the other GPU directly; a GeForce RTX 3090 pair: a 4-link bridge.
    for name, version, count, expected in (("NVIDIA A100-SXM4-80GB", pynvml.NVML_NVLINK_VERSION_3_1, 12, 300),
                                           ("NVIDIA GeForce RTX 3090", pynvml.NVML_NVLINK_VERSION_3_1, 4, 56.25)):
        fake = _Nvml({_H100[0]: [(_H100[1], version, False)] * count, _H100[1]: [(_H100[0], version, False)] * count})
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        topo = cl.read_topology(_Runtime([[0, 1], [1, 0]]), bus_ids=["0000:18:00.0", "0000:2a:00.0"],
                                nvml=[cl.read_nvml_link(b) for b in _H100], names=[name] * 2)
        assert topo.nvlinks == [[0, count], [count, 0]] and topo.nvlink_version == version
        assert cl.peer_rated(topo)["gbytes_per_s"] == pytest.approx(expected), (name, cl.peer_rated(topo))


# ----------------------------------------------------------------------------- the gate (stand-ins for CuPy)
class _Cuda:
    """What gated_seconds and the transfers use of cupy (cupy.cuda.Event/Device/get_elapsed_time,
    Stream.wait_event/ptr, runtime.memcpyAsync/memcpyPeerAsync), logging every call in order."""

    def __init__(self, ms_per_span=2.0):
        self.log, self._events, self.ms = [], 0, ms_per_span
        log = self.log
        outer = self

        class Event:
            def __init__(self):
                self.name = f"e{outer._events}"
                outer._events += 1

            def record(self, stream):
                log.append(("record", self.name, stream.name))

            def synchronize(self):
                log.append(("sync", self.name))

        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                log.append(("device", self.index))

            def __exit__(self, *exc):
                return False

            def synchronize(self):
                pass

        self.cuda = SimpleNamespace(Event=Event, Device=Device, get_elapsed_time=lambda a, b: self.ms)
        self.runtime = SimpleNamespace(
            memcpyAsync=lambda dst, src, n, kind, stream: log.append(("copy", kind, self.streams[stream])),
            memcpyPeerAsync=lambda dst, dd, src, sd, n, stream: log.append(("peer", sd, dd, self.streams[stream])))
        self.streams = {}

    def stream(self, name):
        """A stand-in for cupy.cuda.Stream: its ``ptr`` (what memcpyAsync gets) and ``wait_event``."""
        log = self.log
        stream = SimpleNamespace(name=name, ptr=1000 + len(self.streams),
                                 wait_event=lambda event: log.append(("wait", name, event.name)))
        self.streams[stream.ptr] = name
        return stream


class _Gate:
    def __init__(self, log, timeouts=()):
        self.log, self.timeouts, self.closed = log, set(timeouts), 0

    def close_on(self, stream):
        self.closed += 1
        self.log.append(("gate", stream.name))

    def release(self):
        self.log.append(("release",))

    def opened(self):
        return cc.GATE_TIMED_OUT if self.closed in self.timeouts else cc.GATE_RELEASED


def test_gate_batches():
    assert cc.gate_batches(1) == [1] and cc.gate_batches(600, 256) == [256, 256, 88]
    assert cc.gate_batches(512, 256) == [256, 256] and sum(cc.gate_batches(4096)) == 4096
    with pytest.raises(ValueError):
        cc.gate_batches(0)


def _owner(fake, gate):
    class Buf:
        def __init__(self, ptr):
            self.data = SimpleNamespace(ptr=ptr)

        def __getitem__(self, _):
            return self

        def fill(self, value):
            pass

    pair = (np.zeros(64, np.uint8), np.zeros(64, np.uint8))
    return SimpleNamespace(cp=SimpleNamespace(cuda=fake.cuda), runtime=fake.runtime, index=0, gate=gate,
                           streams=[fake.stream("s1"), fake.stream("s2")], device_in=Buf(1), device_out=Buf(2),
                           host={"pinned": pair, "pageable": pair})


def test_a_pinned_bidirectional_sample_is_gated_batch_by_batch_and_times_only_the_copies():
    fake = _Cuda(ms_per_span=2.0)
    gate = _Gate(fake.log, timeouts={2})
    transfer = cc.CupyTransfer(_owner(fake, gate), level="link-bidir", variant="pinned")
    transfer.prepare(64)
    fake.log.clear()
    seconds = transfer.time(300)  # batches of 256 and 44
    assert seconds == pytest.approx(2 * 2.0e-3)
    log = [e for e in fake.log if e[0] != "device"]
    # Each batch: gate on s1, start after it, s2 waits on start, the copies, s2's end joins s1, stop, release, wait.
    i = 0
    for n in (256, 44):
        gate_at = log.index(("gate", "s1"), i)
        start = log[gate_at + 1]
        assert start[0] == "record" and start[2] == "s1"
        assert log[gate_at + 2] == ("wait", "s2", start[1])
        copies = log[gate_at + 3:gate_at + 3 + 2 * n]
        assert copies.count(("copy", cc.HOST_TO_DEVICE, "s1")) == n
        assert copies.count(("copy", cc.DEVICE_TO_HOST, "s2")) == n
        rest = log[gate_at + 3 + 2 * n:gate_at + 3 + 2 * n + 5]
        done = rest[0]
        assert done[0] == "record" and done[2] == "s2" and rest[1] == ("wait", "s1", done[1])
        assert rest[2][0] == "record" and rest[2][2] == "s1"  # stop, before the gate opens
        assert rest[3] == ("release",) and rest[4] == ("sync", rest[2][1])
        i = gate_at + 1
    assert log.count(("release",)) == 2
    assert transfer.extra["gate_timeouts"] == 1 and "gate kernel" in transfer.method
    transfer.prepare(64)
    assert "gate_timeouts" not in transfer.extra


def test_pageable_copies_are_not_gated_and_there_is_no_pageable_bidir():
    assert ("link-bidir", "pageable") not in cl.HOST_TRANSFERS and len(cl.HOST_TRANSFERS) == 5
    fake = _Cuda()
    gate = _Gate(fake.log)
    owner = _owner(fake, gate)
    with pytest.raises(ValueError, match="no pageable link-bidir"):
        cc.CupyTransfer(owner, level="link-bidir", variant="pageable")
    transfer = cc.CupyTransfer(owner, level="link-d2h", variant="pageable")
    transfer.prepare(64)
    fake.log.clear()
    assert transfer.time(10) == pytest.approx(2.0e-3)
    log = [e for e in fake.log if e[0] != "device"]
    assert log[0][0] == "record" and log[-2][0] == "record" and log[-1][0] == "sync"
    assert log[1:-2] == [("copy", cc.DEVICE_TO_HOST, "s1")] * 10 and ("release",) not in log
    assert "not gated" in transfer.method and "gate kernel" not in transfer.method


def test_peer_copies_gated_with_access_on_and_not_when_staged():
    fake = _Cuda()
    gate = _Gate(fake.log)
    owner = _owner(fake, gate)
    owner.topology = _dgx_like()
    owner.set_peer_access = lambda a, b, on: None

    class Buf:
        data = SimpleNamespace(ptr=7)

        def __getitem__(self, _):
            return self

        def fill(self, value):
            pass

    owner.peer_buffers = {0: (Buf(), Buf(), fake.stream("g0")), 1: (Buf(), Buf(), fake.stream("g1"))}
    for on in (True, False):
        transfer = cc.CupyPeerTransfer(owner, src=1, dst=0, peer_access=on)
        transfer.prepare(64)
        fake.log.clear()
        transfer.time(3)
        assert ("device", 1) in fake.log and fake.log.count(("peer", 1, 0, "g1")) == 3
        assert (("gate", "g1") in fake.log) is on and (("release",) in fake.log) is on


def test_the_gate_kernel_launch_and_its_words(monkeypatch):
    """CupyGate against stand-ins for cupy.cuda.PinnedMemory/PinnedMemoryPointer/RawKernel."""
    monkeypatch.setattr(cc, "gate_source", GATE_FILE.read_text)
    calls = []
    memory = bytearray(64)

    class Pinned:
        def __init__(self, size, flags):
            self.size, self.flags, self.ptr = size, flags, 0x7000

    class Kernel:
        def __init__(self, code, name):
            calls.append(("compile", name, "ert_gate" in code))

        def __call__(self, grid, block, args):
            calls.append(("launch", grid, block, tuple(int(a) for a in args)))

    class Stream:
        def __enter__(self):
            calls.append("on stream")

        def __exit__(self, *exc):
            return False

    runtime = SimpleNamespace(hostAllocMapped=2, hostAllocPortable=1)
    cp = SimpleNamespace(RawKernel=Kernel, cuda=SimpleNamespace(
        runtime=runtime, PinnedMemory=Pinned, PinnedMemoryPointer=lambda mem, offset: memory))
    gate = cc.CupyGate(cp)
    assert calls == [("compile", "ert_gate", True)] and gate._memory.flags == 3
    gate.words[1] = cc.GATE_TIMED_OUT
    gate.close_on(Stream())
    assert gate.opened() == 0 and gate.words[0] == 0  # both words cleared before the launch
    assert calls[1:] == ["on stream", ("launch", (1,), (1,), (0x7000, 0x7004, int(cc.GATE_TIMEOUT_S * 1e9)))]
    gate.release()
    assert gate.words[0] == 1 and memory[0] == 1


NVCC = shutil.which("nvcc")


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA 13) is not on PATH: cannot compile the gate kernel")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"])
def test_the_gate_kernel_compiles_with_nvcc(arch, tmp_path):
    source = tmp_path / "gate.cu"
    source.write_text(GATE_FILE.read_text())
    out = tmp_path / "gate.ptx"
    proc = subprocess.run([NVCC, f"-arch={arch}", "--ptx", "-o", str(out), str(source)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ptx = out.read_text()
    assert ".entry ert_gate" in ptx and "%globaltimer" in ptx and "nanosleep" in ptx
    # The flag is re-read from memory every turn (volatile), never hoisted out of the loop.
    assert re.search(r"ld\.volatile(\.global)?\.u32", ptx), ptx
    # ptxas assembles it for the architecture too (nvcc -cubin).
    cubin = tmp_path / "gate.cubin"
    proc = subprocess.run([NVCC, f"-arch={arch}", "-cubin", "-o", str(cubin), str(source)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and cubin.stat().st_size > 0, proc.stderr


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
        sizes = TransferOptions(min_bytes=4096).sizes(256 << 20)  # as the stage sizes them
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
    # The host opened every gate: no batch ran before all its copies were queued.
    assert not [r["id"] for r in records if r.get("gate_timeouts")]
    assert {(r["level"], r["variant"]) for r in records if r["kind"] == "link"} == set(cl.HOST_TRANSFERS)
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
