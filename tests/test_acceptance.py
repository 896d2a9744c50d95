"""A run's ceilings against a reference ceilings.json (ert.consumers.compare.acceptance, behind jobs/reframe/ert_check.py).

Built on per-host ceilings.json documents from the synthetic multi-host runs
of test_analysis_hosts (a real sweep fanned out over hosts), so names and
values are ert's own.
"""

from __future__ import annotations

import pytest
from test_analysis_hosts import BASE, fan_out, slow_dram

from ert.analysis.ceilings import build
from ert.consumers.compare.acceptance import bounds, missing, perf_values, reference_values, references
from ert.records.rawio import read_raw


@pytest.fixture(scope="module")
def docs() -> dict:
    base = read_raw(BASE)
    return {"even": build(fan_out(base, ["node1", "node2"], 2, lambda h, r: 1.0)),
            "slow": build(fan_out(base, ["node1", "node2"], 2, slow_dram)),
            "other": build(fan_out(base, ["node7", "node8"], 2, lambda h, r: 1.0)),
            "one": build(base)}


def test_every_ceiling_aggregate_and_per_host_is_named_without_a_colon(docs):
    values = perf_values(docs["slow"])
    names = list(values)
    assert "aggregate/fp64 FMA peak" in values and values["aggregate/fp64 FMA peak"][1] == "GFLOP/s"
    for host in ("node1", "node2"):
        assert {n.split("/", 1)[1] for n in names if n.startswith(host + "/")} \
            == {n.split("/", 1)[1] for n in names if n.startswith("aggregate/")}
    assert not any(":" in n for n in names)  # ReFrame splits its reference keys at ':'


def test_a_slow_host_fails_its_own_reference_and_only_its_own(docs):
    slow, even = docs["slow"], docs["even"]
    refs = references(slow, even, 0.10)
    failing = sorted(n for n, (value, unit) in perf_values(slow).items()
                     if n in refs and value < refs[n][0] * (1 + refs[n][1]))
    assert failing and all(n.startswith(("node2/DRAM", "aggregate/DRAM")) for n in failing), failing
    assert references(even, even, 0.10)["node2/fp64 FMA peak"] == (perf_values(even)["node2/fp64 FMA peak"][0],
                                                                    -0.10, None, "GFLOP/s")


def test_which_reference_value_each_name_is_held_to(docs):
    even, other, one = docs["even"], docs["other"], docs["one"]
    single = {n.split("/", 1)[1]: v for n, (v, _) in perf_values(one).items()}
    # Other nodes: the median of the reference's hosts; no aggregate (it ran on other hosts: same count here).
    held = reference_values(even, other)
    median_other = sorted(v for n, (v, _) in perf_values(other).items() if n.endswith("/fp64 FMA peak")
                          and not n.startswith("aggregate"))
    assert held["node1/fp64 FMA peak"] == pytest.approx((median_other[0] + median_other[1]) / 2)
    # A one-host reference (a vendor's per-node figures): every host is held to it; the aggregate to nothing.
    held = reference_values(even, one)
    assert held["node2/fp64 FMA peak"] == single["fp64 FMA peak"]
    assert not any(n.startswith("aggregate/") for n in held)


def test_higher_is_never_a_regression_and_latency_is_the_other_way():
    assert bounds(100.0, "GB/s", 0.1) == (100.0, -0.1, None, "GB/s")
    assert bounds(10.0, "us", 0.1) == (10.0, None, 0.1, "us")


def test_a_ceiling_the_run_lost_is_named(docs):
    even = docs["even"]
    lost = {**even, "hosts": [dict(h, ceilings={"memory": h["ceilings"]["memory"][1:],
                                                  "compute": h["ceilings"]["compute"]}) if h["host"] == "node2" else h
                              for h in even["hosts"]]}
    gone = missing(lost, even)
    assert len(gone) == 1 and gone[0].startswith("node2/")
    assert missing(even, even) == []
