"""Transfer levels (issue 15): links, peers and the network as measured levels, schema 1.6, and their consumers.

The analysis is tested on records worked out by hand; the stage on a real
(tiny) backend that copies numpy arrays and times them; the network under
`mpiexec -n 2` in test_transfers_mpi.py.
"""

from __future__ import annotations

import json
import subprocess
import time

import numpy as np
import pytest

from conftest import command
from ert.config import schema as config_mod
from ert.analysis.ceilings import build
from ert.analysis.transfers import best_pair, plateau_of_largest, transfer_ceilings
from ert.records.rawio import transfer_gbytes_per_s, transfer_latency_us
from ert.records.ceilings_io import SCHEMA_VERSION, load_ceilings, validate, write_ceilings
from ert.consumers import roofs
from ert.consumers.compare.compare import format_comparison
from ert.consumers.terminal.report import format_ceilings
from ert.errors import ErtError
from ert.measure import rundir
from ert.measure.comm import SerialComm
from ert.hardware.hwinfo import read_nics
from ert.measure.metadata import run_header
from ert.measure.network import node_id, plan_pairs
from ert.measure.transfers import run_transfers
from ert.records.rawio import end_record, read_raw
from ert.records.rawlog import RawLog


def rec(level, variant, size, seconds, *, repeats=10, moved=None, valid=True, pair=None, kind=None, **extra):
    """A transfer record whose best sample is ``seconds`` for ``repeats`` transfers of ``size`` bytes."""
    r = {"type": "transfer", "id": f"{level}:{variant}:{size}" + (f":{pair[0]}-{pair[1]}" if pair else ""),
         "level": level, "kind": kind or ("network" if level.startswith("net") else "link"), "variant": variant,
         "method": "hand-made", "bytes": size, "moved_bytes": moved or size, "repeats": repeats,
         "seconds": {"min": seconds, "median": seconds * 1.01, "max": seconds * 1.02},
         "samples": [seconds, seconds * 1.01, seconds * 1.02], "valid": valid, "check": "ok" if valid else "bad",
         "noisy": False, "spread": 0.02, "time": 0.0, **extra}
    if pair:
        r["pair"] = list(pair)
    return r


def curve(level, variant, gbs_by_size, *, pair=None, **extra):
    """Records whose rates are exactly ``gbs_by_size`` (GB/s at each size)."""
    return [rec(level, variant, size, size * 10 / (gbs * 1e9), pair=pair, **extra)
            for size, gbs in gbs_by_size.items()]


# ----------------------------------------------------------------------------- the analysis
def test_rate_and_latency_follow_the_contract():
    r = rec("link-h2d", "pinned", 1_000_000, 0.001, repeats=10)
    assert transfer_gbytes_per_s(r) == pytest.approx(10.0)  # 1e6 B x 10 / 1 ms
    assert transfer_latency_us(r) == pytest.approx(101.0)  # median 1.01 ms / 10
    # A ping-pong counts one-way trips: 100 round trips of 8 B in 0.4 ms -> 2 us one way.
    pp = rec("net-intra-node", "p2p", 8, 0.0004, repeats=200)
    assert transfer_latency_us(pp) == pytest.approx(2.02)


def test_plateau_is_the_largest_sizes_within_ten_percent():
    # Latency-bound small sizes, a cache bump in the middle, a plateau at the top.
    recs = curve("link-h2d", "copy", {64: 0.1, 4096: 5.0, 65536: 30.0, 1 << 20: 20.0, 1 << 22: 21.0, 1 << 24: 20.5})
    chosen = plateau_of_largest(recs)
    assert [r["bytes"] for r in chosen] == [1 << 20, 1 << 22, 1 << 24]


def test_ceilings_entries_carry_rated_latency_evidence_and_skip_invalid():
    recs = curve("link-h2d", "pinned", {8: 0.001, 1 << 20: 24.0, 1 << 24: 25.0})
    recs += [rec("link-h2d", "pinned", 1 << 26, 1e-6, valid=False)]  # impossible and failed its check
    recs += curve("link-d2h", "pageable", {8: 0.001, 1 << 24: 10.0}, transport="a bus")
    meta = {"backend_info": {"link_rated": {"link-h2d": {"gbytes_per_s": 63.0, "derivation": "PCIe Gen5 x16"},
                                            "link-d2h": {"gbytes_per_s": None,
                                                         "derivation": "no rated value: no PCIe link found"}}}}
    entries, warnings = transfer_ceilings(recs, meta)
    h2d, d2h = entries
    assert (h2d["level"], h2d["kind"], h2d["variant"]) == ("link-h2d", "link", "pinned")
    assert h2d["gbytes_per_s"] == pytest.approx(24.5)
    assert h2d["wss_bytes"] == [1 << 20, 1 << 24] and h2d["n_points"] == 2
    assert h2d["latency_bytes"] == 8 and h2d["latency_us"] > 0
    assert h2d["evidence"]["point_ids"] == ["link-h2d:pinned:1048576", "link-h2d:pinned:16777216"]
    assert h2d["rated"] == {"gbytes_per_s": 63.0, "ratio": pytest.approx(24.5 / 63, abs=1e-4),
                            "derivation": "PCIe Gen5 x16"}
    assert d2h["rated"]["ratio"] is None and d2h["rated"]["derivation"] == "no rated value: no PCIe link found"
    assert d2h["transport"] == "a bus"
    assert any("1 transfer record(s) failed their data check" in w for w in warnings)
    assert any("link-d2h pageable: the largest size stands alone" in w for w in warnings)


def test_network_rated_values_come_from_nics_or_say_why_not():
    recs = curve("net-inter-node", "p2p", {8: 0.001, 1 << 20: 11.0, 1 << 22: 11.5}, pair=(0, 1))
    recs += curve("net-intra-node", "p2p", {8: 0.001, 1 << 22: 9.0}, pair=(0, 2))
    nic = {"name": "ib0", "gbytes_per_s": 25.0, "source": "rate 200 Gb/sec / 8"}
    entries, _ = transfer_ceilings(recs, {"network": {"nics": [nic]}})
    intra, inter = entries  # reported in level order
    assert intra["rated"]["derivation"].startswith("no rated value: ranks on one node exchange through shared")
    assert inter["rated"]["gbytes_per_s"] == 25.0 and "ib0" in inter["rated"]["derivation"]
    assert inter["pairs"] == [[0, 1]]
    entries, warnings = transfer_ceilings(recs, {"network": {"nics": [nic], "node_override": "rank%2"}})
    assert entries[1]["rated"]["ratio"] is None and "ERT_TEST_NODE_ID" in entries[1]["rated"]["derivation"]
    assert any(w.startswith("TEST ONLY: node identity was overridden") for w in warnings)
    entries, _ = transfer_ceilings(recs, {})
    assert entries[1]["rated"]["derivation"].startswith("no rated value: no NIC speed")


def test_peer_levels_are_the_best_pair_with_a_matrix():
    recs = curve("peer-d2d", "p2p", {1 << 20: 40.0, 1 << 24: 41.0}, pair=(0, 1), kind="peer", peer_access=True)
    recs += curve("peer-d2d", "p2p", {1 << 20: 20.0, 1 << 24: 21.0}, pair=(1, 0), kind="peer", peer_access=False)
    best, matrix = best_pair(recs)
    assert {tuple(r["pair"]) for r in best} == {(0, 1)}
    assert matrix["devices"] == [0, 1]
    assert matrix["gbytes_per_s"] == [[None, 40.5], [20.5, None]]
    assert matrix["peer_access"] == [[None, True], [False, None]]
    entries, _ = transfer_ceilings(recs, {})
    assert entries[0]["gbytes_per_s"] == pytest.approx(40.5) and entries[0]["matrix"] == matrix


# ----------------------------------------------------------------------------- node identity and pairs
def test_node_override_forms_and_errors():
    assert [node_id(r, 4, "h", "rank%2") for r in range(4)] == ["node0", "node1", "node0", "node1"]
    assert [node_id(r, 4, "h", "rank//2") for r in range(4)] == ["node0", "node0", "node1", "node1"]
    assert [node_id(r, 3, "h", "a,a,b") for r in range(3)] == ["nodea", "nodea", "nodeb"]
    assert node_id(1, 2, "host1", None) == "host1"
    with pytest.raises(ErtError, match="ERT_TEST_NODE_ID: expected 'rank%N'"):
        node_id(0, 3, "h", "a,b")


def test_pairs_for_one_node_two_nodes_and_mixed():
    assert plan_pairs(["h", "h"]) == {"intra": [0, 1], "inter": None, "injection": None}
    assert plan_pairs(["a", "b"]) == {"intra": None, "inter": [0, 1], "injection": [[0, 1]]}
    assert plan_pairs(["a", "b", "a", "b"]) == {"intra": [0, 2], "inter": [0, 1], "injection": [[0, 1], [2, 3]]}
    assert plan_pairs(["a"])["intra"] is None


def test_nic_rates_from_sysfs(tmp_path):
    net = tmp_path / "net"
    for name, speed in (("eth0", "100000\n"), ("lo", "10\n"), ("veth1", "10000\n"), ("eth1", "-1\n")):
        (net / name).mkdir(parents=True)
        (net / name / "speed").write_text(speed)
        if name.startswith("eth"):
            (net / name / "device").mkdir()
    port = tmp_path / "ib" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    nics = read_nics(str(net), str(tmp_path / "ib"))
    assert [(n["name"], n["gbytes_per_s"]) for n in nics] == [("eth0", 12.5), ("mlx5_0:1", 50.0)]


# ----------------------------------------------------------------------------- the stage, with a real copy
class _NumpyCopy:
    """One link level of the test backend: a real numpy copy between two host arrays, timed and checked."""

    kind, variant, method, directions = "link", "copy", "numpy copyto", 1

    def __init__(self, level, max_bytes):
        self.level = level
        self.extra = {"transport": "memory copy in host memory (a test backend, not a bus)"}
        self.src = (np.arange(max_bytes) % 251).astype(np.uint8)
        self.dst = np.zeros(max_bytes, dtype=np.uint8)

    def prepare(self, nbytes):
        self.n = nbytes
        self.dst[:nbytes] = 0

    def time(self, count):
        t0 = time.perf_counter()
        for _ in range(count):
            np.copyto(self.dst[:self.n], self.src[:self.n])
        return time.perf_counter() - t0

    def check(self):
        ok = bool(np.array_equal(self.dst[:self.n], self.src[:self.n]))
        return ok, "copy equals source" if ok else "differs"


class NumpyLinks:
    """A tiny real backend with the links capability: numpy memory copies (host memory both sides)."""

    name = "numpy-links"
    threads = 1

    def __init__(self):
        self.calls = []

    def link_transfers(self, max_bytes):
        self.calls.append(max_bytes)
        return [_NumpyCopy(level, max_bytes) for level in ("link-h2d", "link-d2h")]

    def link_rated(self, reference=None):
        return {"link-h2d": {"gbytes_per_s": None, "derivation": "no rated value: host memory on both sides"}}

    def describe(self):
        return {"device": "numpy"}


def _new_run(tmp_path, backend, **cfg_keys):
    cfg = config_mod.from_dict({"backend": "numba-cpu", "threads": 1, "levels": ["links"], "sweep": "dense",
                                "transfer": {"min_bytes": 1024, "max_bytes": 1 << 20, "growth": 16,
                                             "min_seconds": 0.0005, "samples": 2}, **cfg_keys})
    header = run_header(cfg, backend=backend, comm=SerialComm(), placement=None, rank_warnings=[], planned_points=0)
    assert header["metadata"]["backend_info"]["link_rated"] == backend.link_rated()
    run_dir = tmp_path / "run"
    rundir.create(run_dir, cfg)
    log = RawLog.open(run_dir, header=header, writes=True)
    log.append(end_record(wall_seconds=0.0, interrupted=False, measured=0))
    log.close()
    return cfg, run_dir


def _run_transfers(cfg, run_dir, backend) -> bool:
    """The stage on a run directory, as ert-run --resume runs it: the raw file read once, then one log."""
    log = RawLog(run_dir / "raw.jsonl", read_raw(run_dir), writes=True)
    try:
        return run_transfers(cfg=cfg, log=log, backend=backend, comm=SerialComm())
    finally:
        log.close()


def test_links_stage_records_every_size_and_a_resume_skips_them(tmp_path):
    backend = NumpyLinks()
    cfg, run_dir = _new_run(tmp_path, backend)
    assert _run_transfers(cfg, run_dir, backend) is False
    raw = read_raw(run_dir)
    assert sorted(r["id"] for r in raw.transfers) == sorted(
        f"{lv}:copy:{s}" for lv in ("link-h2d", "link-d2h") for s in (1024, 16384, 262144, 1048576))
    doc = build(raw)
    write_ceilings(doc, run_dir / "ceilings.json")
    links = [e for e in doc["ceilings"]["memory"] if e.get("kind") == "link"]
    assert [e["level"] for e in links] == ["link-h2d", "link-d2h"]
    assert all(e["gbytes_per_s"] > 0.5 and e["rated"]["ratio"] is None for e in links)
    assert links[0]["rated"]["derivation"] == "no rated value: host memory on both sides"
    assert doc["metadata"]["transfers"] == {"measured": 8, "invalid": 0}
    # The stage ends with its own end record: its seconds are the run's wall time (the sweep's end said 0.0).
    stage_end = raw.ends[-1]
    assert stage_end["stage"] == "transfers" and stage_end["wall_seconds"] > 0
    assert doc["metadata"]["wall_seconds"] == pytest.approx(stage_end["wall_seconds"], abs=1e-3)
    # Cut the stage's end and last two records (a kill): a resume measures just those, with the same levels after.
    lines = (run_dir / "raw.jsonl").read_text().splitlines(keepends=True)
    assert '"stage":"transfers"' in lines[-1].replace(" ", "")
    (run_dir / "raw.jsonl").write_text("".join(lines[:-3]))
    again = NumpyLinks()
    _run_transfers(cfg, run_dir, again)
    resumed = read_raw(run_dir)
    assert len(resumed.transfers) == 8
    assert [r["id"] for r in resumed.transfers[-2:]] == ["link-h2d:copy:1048576", "link-d2h:copy:1048576"]
    assert [e["level"] for e in build(resumed)["ceilings"]["memory"] if e.get("kind")] == ["link-h2d", "link-d2h"]


def test_the_links_capability_is_a_declared_protocol():
    from ert.backends import LinkBackend
    from ert.backends.cuda import CudaBackend
    from ert.backends.numba_cpu import NumbaCpuBackend
    from ert.backends.opencl import OpenCLBackend

    assert isinstance(NumpyLinks(), LinkBackend) and not isinstance(object(), LinkBackend)
    for backend_cls in (CudaBackend, OpenCLBackend):
        assert callable(backend_cls.link_transfers) and callable(backend_cls.link_rated)

    assert not hasattr(NumbaCpuBackend, "link_transfers")  # the host is the host


def test_a_backend_without_the_hook_and_one_rank_measure_nothing(tmp_path):
    class NoLinks:
        pass

    cfg, run_dir = _new_run(tmp_path, NumpyLinks(), levels=["links", "network"])
    assert _run_transfers(cfg, run_dir, NoLinks()) is False
    assert read_raw(run_dir).transfers == []


# ----------------------------------------------------------------------------- schema and consumers
def _doc_with_transfers() -> dict:
    recs = curve("link-h2d", "pinned", {8: 0.001, 1 << 20: 24.0, 1 << 24: 25.0})
    recs += curve("net-intra-node", "p2p", {8: 0.004, 1 << 20: 9.0, 1 << 22: 9.5}, pair=(0, 1))
    meta = {"backend_info": {"link_rated": {"link-h2d": {"gbytes_per_s": 63.0, "derivation": "PCIe Gen5 x16"}}}}
    entries, warnings = transfer_ceilings(recs, meta)
    doc = load_ceilings("tests/data/ceilings-handworked-gpu.json")
    doc["schema_version"] = SCHEMA_VERSION
    doc["ceilings"]["memory"] += entries
    doc["warnings"] += warnings
    return doc


def test_schema_1_6_validates_transfer_entries_and_old_files_still_read():
    doc = _doc_with_transfers()
    validate(doc)
    bad = json.loads(json.dumps(doc))
    bad["ceilings"]["memory"][-1]["kind"] = "nic"
    with pytest.raises(ErtError, match=r"ceilings.memory\[\d+\].kind: must be one of link, peer, network"):
        validate(bad)
    assert load_ceilings("tests/data/ceilings-handworked-cpu.json")["schema_version"] == "1.0"


def test_consumers_keep_transfer_levels_apart_from_memory_roofs(tmp_path):
    doc = _doc_with_transfers()
    mem, _ = roofs.memory_roofs(doc)
    assert all(not r.level.startswith(("link", "net")) for r in mem)
    assert [r.name for r in roofs.transfer_roofs(doc)] == ["link-h2d pinned", "net-intra-node p2p"]
    text = format_ceilings(doc)
    assert "Links and network" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("link-h2d"))
    assert "24.5" in row and "39%" in row
    assert "no rated value: ranks on one node exchange through shared memory" in text
    other = json.loads(json.dumps(doc))
    for e in other["ceilings"]["memory"]:
        if e.get("kind"):
            e["gbytes_per_s"] *= 2
    table = format_comparison([doc, other], ["a", "b"])
    assert any(line.startswith("link-h2d pinned ") and line.rstrip().endswith("2.00x") for line in table.splitlines())
    assert "net-intra-node p2p latency" in table


def test_plot_and_profile_use_the_link_roofs(tmp_path):
    from ert.interop.ncu_csv import read_ncu_csv
    from ert.consumers.plots.plot import _fmt_rate, plot_roofline
    from ert.consumers.profile.profile import profile_kernel

    doc = _doc_with_transfers()
    path = tmp_path / "roofline.svg"
    plot_roofline(doc, path)
    text = path.read_text()
    # Every link and network level is drawn as its own labelled roof, at its measured rate.
    for e in doc["ceilings"]["memory"]:
        if e.get("kind"):
            assert f"{e['level']} {e.get('variant', '')}".strip() + f" {_fmt_rate(e['gbytes_per_s'])} GB/s" in text
    # An ncu "raw" page of one kernel that streams host memory: 1e9 DP FMAs, 2 GB through sysmem sectors.
    csv = ('"ID","Kernel Name","gpu__time_duration.sum","dram__bytes.sum","lts__t_sectors_aperture_sysmem.sum",'
           '"sm__sass_thread_inst_executed_op_dfma_pred_on.sum","sm__sass_thread_inst_executed_op_dadd_pred_on.sum",'
           '"sm__sass_thread_inst_executed_op_dmul_pred_on.sum"\n'
           '"","","msecond","byte","sector","inst","inst","inst"\n'
           '"0","host_stream","100","1000000","62500000","1000000000","0","0"\n')
    (tmp_path / "k.csv").write_text(csv)
    kernel = read_ncu_csv(csv, path=tmp_path / "k.csv")[0]
    assert kernel.bytes["SYSMEM"] == 62500000 * 32
    prof = profile_kernel(kernel, doc)
    sysmem = next(lv for lv in prof.results[0].levels if lv.level == "SYSMEM")
    assert sysmem.roof_level == "link-h2d pinned" and sysmem.roof_gbytes_per_s == pytest.approx(24.5)
    assert prof.results[0].binding == "link-h2d pinned bandwidth"


# ----------------------------------------------------------------------------- config and command line
def test_levels_and_transfer_config_errors_name_the_key(tmp_path):
    with pytest.raises(ErtError, match=r"levels\[0\]: Input should be 'memory', 'links' or 'network'"):
        config_mod.from_dict({"levels": ["nic"]})
    with pytest.raises(ErtError, match="transfer: network_max_bytes .* is smaller than min_bytes"):
        config_mod.from_dict({"transfer": {"min_bytes": 64, "network_max_bytes": 8}})
    with pytest.raises(ErtError, match=r"transfer.sizes: unknown key"):
        config_mod.from_dict({"transfer": {"sizes": [1]}})
    assert config_mod.TransferOptions(min_bytes=8, max_bytes=1000, growth=10).sizes(1000) == [8, 80, 800, 1000]


def test_an_unknown_level_on_the_command_line_is_one_line(tmp_path):
    proc = subprocess.run([command("ert-run"), "--levels", "links,nic", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown level 'nic' (known: memory, links, network)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_network_only_run_on_one_rank_says_nothing_was_measured(tmp_path):
    run_dir = tmp_path / "r"
    proc = subprocess.run([command("ert-run"), "configs/tiny.yaml", "--levels", "network", "--out", str(run_dir)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "network: not measured (one rank" in proc.stderr
    doc = json.loads((run_dir / "ceilings.json").read_text())
    assert doc["ceilings"]["memory"] == [] and doc["metadata"]["points"]["measured"] == 0


# ----------------------------------------------------------------------------- the link between hosts
from ert.analysis.rated import occupied_cores  # noqa: E402
from ert.analysis.transfers import MIN_INTERFACE_SHARE, interface_share  # noqa: E402
from ert.hardware.hwinfo import iface_bytes, interfaces, route_between  # noqa: E402

VETH_ROUTE = {"name": "eth0", "address": "10.77.0.11/24", "virtual": True, "kind": "veth", "speed_mbit": 10000,
              "peer_address": "10.77.0.12/24", "from": "node1", "to": "node2"}


def test_the_route_is_the_interface_whose_subnet_holds_the_partner():
    mine = [{"name": "ib0", "address": "192.168.5.3/16", "virtual": False, "kind": "device", "speed_mbit": None},
            {"name": "eth0", "address": "10.77.0.11/24", "virtual": True, "kind": "veth", "speed_mbit": 10000}]
    theirs = [{"name": "eth0", "address": "10.77.0.12/24", "virtual": True, "kind": "veth", "speed_mbit": 10000}]
    route = route_between(mine, theirs)
    assert route["name"] == "eth0" and route["peer_address"] == "10.77.0.12/24"
    assert route_between(mine, [{"name": "x", "address": "172.16.0.9/24"}]) is None  # routed: no shared subnet


def test_this_hosts_interfaces_are_read_from_the_kernel():
    import shutil

    found = interfaces()
    assert all("/" in i["address"] and isinstance(i["virtual"], bool) for i in found)
    assert "lo" not in {i["name"] for i in found}
    if shutil.which("ip"):  # the same interfaces and addresses as iproute2 lists (each one's primary address)
        listed = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
        theirs = {}
        for line in listed.splitlines():
            name, addr = line.split()[1], line.split()[3]
            if name != "lo":
                theirs.setdefault(name.split("@")[0], addr)
        assert {i["name"]: i["address"] for i in found} == theirs
    for iface in found:  # the byte counters the stage reads around each size
        assert isinstance(iface_bytes(iface["name"]), int)
    assert iface_bytes("no-such-interface") is None


def test_a_virtual_link_has_no_rated_value_and_a_real_nic_has_its_speed():
    recs = curve("net-inter-node", "p2p", {8: 0.001, 1 << 22: 1.4}, pair=(0, 2))
    (entry,), _ = transfer_ceilings(recs, {"network": {"route": VETH_ROUTE, "nics": []}})
    assert entry["rated"]["gbytes_per_s"] is None
    assert entry["rated"]["derivation"].startswith("no rated value: veth has no line rate")
    assert "10000 Mb/s is nominal" in entry["rated"]["derivation"]
    nic = {**VETH_ROUTE, "name": "enp1s0", "virtual": False, "kind": "device", "speed_mbit": 100000}
    (entry,), _ = transfer_ceilings(recs, {"network": {"route": nic, "nics": []}})
    assert entry["rated"]["gbytes_per_s"] == 12.5 and "enp1s0" in entry["rated"]["derivation"]
    assert entry["rated"]["ratio"] == pytest.approx(1.4 / 12.5, rel=1e-3)


def test_messages_that_bypassed_a_virtual_link_are_called_out():
    crossed = [{"interface": "eth0", "counted": 900, "payload": 1000}]
    missed = [{"interface": "eth0", "counted": 3, "payload": 1000}]
    sizes = {8: 0.001, 1 << 22: 11.0}
    for counters, warned in ((crossed, False), (missed, True)):
        recs = curve("net-inter-node", "p2p", sizes, pair=(0, 2))
        for r in recs:
            r["interface_bytes"] = counters[0]
        (entry,), warnings = transfer_ceilings(recs, {"network": {"route": VETH_ROUTE}})
        assert entry["interface_bytes"]["share"] == pytest.approx(counters[0]["counted"] / 1000)
        assert any("crossed eth0" in w for w in warnings) is warned
    # A real NIC (RDMA may bypass its IP counters): the share is recorded, never called a bypass.
    recs = curve("net-inter-node", "p2p", sizes, pair=(0, 2))
    for r in recs:
        r["interface_bytes"] = missed[0]
    _, warnings = transfer_ceilings(recs, {"network": {"route": {**VETH_ROUTE, "virtual": False}}})
    assert not any("crossed" in w for w in warnings)
    assert interface_share([{"id": "x"}]) is None
    assert 0 < MIN_INTERFACE_SHARE < 1


def test_cores_shared_by_ranks_of_one_host_count_once():
    def p(host, cpus, cores=1):
        return {"host": host, "cpus": cpus, "cores": cores}
    # 4 ranks, 2 per host, each host's pair on one core: 2 cores do the work.
    assert occupied_cores([p("n1", [0]), p("n1", [0]), p("n2", [1]), p("n2", [1])], 1) == 2
    # Own cores each: all of them.
    assert occupied_cores([p("n1", [0]), p("n1", [1]), p("n2", [0]), p("n2", [1])], 1) == 4
    # SMT siblings (2 cpus per core), 2 cores per rank.
    assert occupied_cores([p("n1", [0, 1, 2, 3], 2), p("n1", [4, 5, 6, 7], 2)], 2) == 4
    assert occupied_cores(None, 1) is None and occupied_cores([None, p("n1", [0])], 1) is None
