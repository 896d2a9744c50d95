"""Per-host ceilings of a run on 2+ hosts (issue 32): synthetic multi-host raw files built from a real sweep.

Each synthetic host's region seconds are a real default sweep's (Zen 4) times x the host's own factor, so
the levels are real ones; the aggregate's samples are the slowest host's, as the driver writes them.
"""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cmd
from ert.analysis.ceilings import build
from ert.records.ceilings_io import validate
from ert.consumers.compare.ceiling_values import ceiling_values
from ert.consumers.terminal.hosts_table import format_hosts_comparison, format_hosts_section
from ert.consumers.terminal.report import format_ceilings
from ert.measure.driver import host_region_seconds
from ert.records.rawio import RawData, point_record, read_raw, write_raw

BASE = Path(__file__).parent / "data" / "bare-zen4-full.raw.jsonl"
DRAM = 64 << 20  # DRAM-bound working sets of the base run: the memory window starts at 2 x its 32 MiB L3


@pytest.fixture(scope="module")
def base() -> RawData:
    return read_raw(BASE)


def fan_out(base: RawData, hosts: list[str], ranks_per_host: int, factor, *, jitter=0.0, seed=0,
            threshold=None) -> RawData:
    """``base`` run on every rank of ``hosts``; ``factor(host, record)`` scales a host's rate there."""
    rng = np.random.default_rng(seed)
    header = copy.deepcopy(base.header)
    meta = header["metadata"]
    ranks = len(hosts) * ranks_per_host
    meta.update(hosts=hosts, ranks=ranks, ranks_per_host={h: ranks_per_host for h in hosts},
                placement=[{"host": h, "rank": i * ranks_per_host + k} for i, h in enumerate(hosts)
                           for k in range(ranks_per_host)])
    if threshold is not None:
        meta["config"] = dict(meta["config"], slow_host_threshold=threshold)
    points = []
    for rec in base.points:
        by_host = {h: [s / factor(h, rec) * float(np.exp(rng.normal(0, jitter))) for s in rec["samples"]]
                   for h in hosts}
        region = [max(by_host[h][i] for h in hosts) for i in range(len(rec["samples"]))]
        points.append(dict(copy.deepcopy(rec), ranks=ranks, elements=rec["elements"] * ranks, samples=region,
                           wss_bytes=rec["wss_bytes"] * ranks,
                           seconds={"min": min(region), "median": statistics.median(region), "max": max(region)},
                           host_seconds=by_host,
                           limiting_host=max(by_host, key=lambda h: statistics.median(by_host[h]))))
    return RawData(None, header, points, ends=list(base.ends))


def slow_dram(host: str, rec: dict) -> float:
    return 0.6 if host == "node2" and rec["wss_bytes"] >= DRAM else 1.0


def test_each_host_gets_the_aggregates_ceilings_and_the_slow_one_is_named(base):
    doc = build(fan_out(base, ["node1", "node2"], 2, slow_dram))
    validate(json.loads(json.dumps(doc)))  # the schema knows hosts[], limiting_hosts, ratio_to_median
    assert [h["host"] for h in doc["hosts"]] == ["node1", "node2"]
    assert [h["ranks"] for h in doc["hosts"]] == [[0, 1], [2, 3]]
    aggregate = {n for n in ceiling_values(doc["ceilings"]) if not n.startswith(("net-", "link-", "peer-"))}
    for host in doc["hosts"]:
        # The contract the ReFrame test builds on: every aggregate ceiling, by the same name, per host.
        assert set(ceiling_values(host["ceilings"])) == aggregate
    node1, node2 = ({(c["level"], c["precision"], c["access"]): c for c in h["ceilings"]["memory"]}
                    for h in doc["hosts"])
    dram, l1 = ("DRAM", "fp64", "rw"), ("L1", "fp64", "rw")
    # Each host does half the work: at L1 its rate is half the aggregate's; at DRAM node2 does 0.6 of node1.
    agg_l1 = next(c for c in doc["ceilings"]["memory"] if (c["level"], c["precision"], c["access"]) == l1)
    # A host's level is the plateau statistic over the aggregate level's points; the aggregate's roof is the
    # fastest rate the run confirmed there (issue 30), at or above that plateau: a host's share never beats it.
    assert node1[l1]["gbytes_per_s"] == pytest.approx(node2[l1]["gbytes_per_s"], rel=0.02)
    assert 0.9 * agg_l1["gbytes_per_s"] / 2 <= node1[l1]["gbytes_per_s"] <= 1.02 * agg_l1["gbytes_per_s"] / 2
    assert node2[dram]["gbytes_per_s"] / node1[dram]["gbytes_per_s"] == pytest.approx(0.6, rel=0.02)
    assert node2[dram]["ratio_to_median"] == pytest.approx(0.6 / 0.8, rel=0.02)
    assert node1[l1]["ratio_to_median"] == pytest.approx(1.0)
    agg_dram = next(c for c in doc["ceilings"]["memory"] if (c["level"], c["precision"], c["access"]) == dram)
    assert agg_dram["limiting_hosts"] == {"node2": agg_dram["n_points"]}
    slow = [w for w in doc["warnings"] if getattr(w, "code", None) == "slow-host"]
    assert len(slow) == 1 and slow[0].startswith("node2: DRAM fp64 read+write 0.75 of the median of 2 hosts "
                                                 f"(limits the aggregate at {agg_dram['n_points']} of "
                                                 f"{agg_dram['n_points']} points)")
    assert doc["metadata"]["warning_codes"][doc["warnings"].index(slow[0])] == {"code": "slow-host", "group": "act"}
    assert doc["hosts"][1]["slow"]["ceiling"] == "DRAM fp64 read+write" and "slow" not in doc["hosts"][0]


def test_hosts_alike_name_none_and_read_near_one(base):
    doc = build(fan_out(base, ["a1", "a2", "a3"], 1, lambda h, r: 1.0, jitter=0.01))
    assert not [w for w in doc["warnings"] if getattr(w, "code", None) == "slow-host"]
    ratios = [c["ratio_to_median"] for h in doc["hosts"] for kind in ("memory", "compute") for c in h["ceilings"][kind]]
    assert ratios and all(0.95 < r < 1.05 for r in ratios)


def test_the_threshold_is_the_configs(base):
    loose = build(fan_out(base, ["node1", "node2"], 1, slow_dram, threshold=0.5))
    assert not [w for w in loose["warnings"] if getattr(w, "code", None) == "slow-host"]
    clock = build(fan_out(base, ["node1", "node2", "node3"], 1, lambda h, r: 0.85 if h == "node3" else 1.0,
                          threshold=0.1))
    slow = [w for w in clock["warnings"] if getattr(w, "code", None) == "slow-host"]
    assert len(slow) == 1 and slow[0].startswith("node3: ") and "0.85 of the median of 3 hosts" in slow[0]


def test_a_run_on_one_host_has_no_hosts_section(base):
    assert "hosts" not in build(base)


def test_a_compute_peak_per_host_is_its_own_best_point(base):
    doc = build(fan_out(base, ["node1", "node2"], 1, lambda h, r: 0.5 if h == "node2" else 1.0))
    for agg, one, two in zip(doc["ceilings"]["compute"], *(h["ceilings"]["compute"] for h in doc["hosts"])):
        # The aggregate is both hosts' work over node2's time, twice node1's: node1's own rate.
        assert one["gflops_per_s"] == pytest.approx(agg["gflops_per_s"], rel=0.01)
        assert two["gflops_per_s"] == pytest.approx(one["gflops_per_s"] / 2, rel=0.01)
        assert agg["limiting_hosts"] == {"node2": 1}


def test_host_region_seconds_is_each_hosts_slowest_rank_or_its_span():
    # a: two ranks together (ends 10.0, 10.01); b: two ranks that took turns (1 s each, ends 10 and 11).
    everyone = [(1.0, 10.0), (1.0, 10.01), (1.0, 10.0), (1.0, 11.0)]
    got = host_region_seconds(everyone, ["a", "a", "b", "b"])
    assert got["a"] == pytest.approx(1.0) and got["b"] == pytest.approx(2.0)


def test_point_records_keep_each_hosts_seconds_and_the_limiting_host():
    common = dict(point_id="p", spec={"precision": "fp64", "flops_per_element": 1, "fma": False, "access": "rw"},
                  wss_bytes=1 << 20, elements_per_thread=1024, launch=None, ranks=2, threads_per_rank=1, trials=4,
                  samples=[2.0, 2.1], rank_seconds=[[1.0, 2.0], [1.1, 2.1]], spread=0.05, noisy=False,
                  remeasured=0, serialized=0, valid=True, check="ok")
    rec = point_record(**common, host_seconds=[{"n1": 1.0, "n2": 2.0}, {"n1": 1.1, "n2": 2.1}])
    assert rec["host_seconds"] == {"n1": [1.0, 1.1], "n2": [2.0, 2.1]} and rec["limiting_host"] == "n2"
    assert "host_seconds" not in point_record(**common) and "limiting_host" not in point_record(**common)


def test_show_prints_the_host_table_and_the_warning(base):
    doc = json.loads(json.dumps(build(fan_out(base, ["node1", "node2"], 2, slow_dram))))
    text = format_ceilings(doc, width=120)
    table = text[text.index("Hosts: each ceiling as a ratio to the median of 2 hosts"):]
    row = next(line for line in table.splitlines() if line.startswith("DRAM fp64 read+write GB/s"))
    assert row.split()[-2:] == ["1.25", "0.75*"]
    assert "node2: DRAM fp64 read+write 0.75 of the median of 2 hosts" in text


def test_many_hosts_are_summarised_to_fit_the_screen(base):
    hosts = [f"n{i:02d}" for i in range(40)]
    doc = json.loads(json.dumps(build(fan_out(base, hosts, 1, lambda h, r: 0.7 if h == "n07" else 1.0))))
    lines = format_hosts_section(doc, width=100)
    assert max(len(line) for line in lines[2:]) <= 100
    row = next(line for line in lines if line.startswith("fp64 FMA peak GFLOP/s"))
    assert "n07 0.70*" in row and row.split()[-1] == "1"  # the lowest host, and one host below
    assert len(format_hosts_section(doc, width=100, verbose=True)[1].split()) == 2 + 40  # every host


def test_compare_hosts_lists_one_runs_hosts(base, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_raw(fan_out(base, ["node1", "node2"], 1, slow_dram), run / "raw.jsonl")
    proc = run_cmd("ert", "analyze", str(run), "-o", str(run / "ceilings.json"))
    assert proc.returncode == 0, proc.stderr
    proc = run_cmd("ert", "compare", str(run), "--hosts")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["A: node1  (rank 0)", "B: node2  (rank 1)"]
    row = next(line for line in lines if line.startswith("DRAM fp64 read+write GB/s"))
    assert row.split()[-2:] == ["1.25", "0.75*"]
    assert "  - node2: DRAM fp64 read+write GB/s 0.75" in lines
    assert lines[-1] == "  named slow, beyond the scatter of the values (the slow-host warning): node2"
    assert format_hosts_comparison(json.loads((run / "ceilings.json").read_text())) == proc.stdout.rstrip("\n")
    data = json.loads(run_cmd("ert", "compare", str(run), "--hosts", "--json").stdout)
    assert [h["host"] for h in data["hosts"]] == ["node1", "node2"]
    bad = run_cmd("ert", "compare", str(run), str(run), "--hosts")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "--hosts" in bad.stderr


def test_hosts_apart_only_within_the_scatter_are_listed_not_named(base):
    # Two healthy hosts on a busy machine: every region's seconds scattered by 40 %.
    doc = build(fan_out(base, ["node1", "node2"], 1, lambda h, r: 1.0, jitter=0.4, seed=3))
    lows = [c for h in doc["hosts"] for kind in ("memory", "compute") for c in h["ceilings"][kind]
            if c["ratio_to_median"] < 0.9]
    assert lows  # the noise alone puts some host ceilings more than 10 % below the median ...
    assert not [w for w in doc["warnings"] if getattr(w, "code", None) == "slow-host"]  # ... but names no host
    listed = [w for w in doc["warnings"] if "only within their scatter" in w]
    assert len(listed) == 1 and listed[0].code == "noisy-level" and listed[0].startswith(f"{len(lows)} host ")


def test_the_threshold_key_is_checked():
    from ert.config.schema import from_dict
    from ert.errors import ErtError

    assert from_dict({"slow_host_threshold": 0.2}).slow_host_threshold == 0.2
    with pytest.raises(ErtError) as bad:
        from_dict({"slow_host_threshold": 1.5}, source="c.yaml")
    assert bad.value.key == "slow_host_threshold" and "c.yaml" in str(bad.value)
