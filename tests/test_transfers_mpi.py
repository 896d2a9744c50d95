"""The network levels for real: `mpiexec -n 2 ert-run` with `levels: [network]` (MPICH from PyPI).

One machine here: the inter-node and injection paths run with the TEST-ONLY
node override (ERT_TEST_NODE_ID), which splits the two local ranks into two
"nodes"; their bytes go through shared memory, not a NIC.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import command

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

NET = {
    "backend": "numba-cpu",
    "threads": 1,
    "levels": ["network"],
    "transfer": {"min_bytes": 8, "network_max_bytes": 1 << 21, "growth": 16, "min_seconds": 0.002, "samples": 3},
    "timing": {"noise_threshold": 0.5},
}


def run2(tmp_path: Path, name: str, *extra, env=None) -> tuple[subprocess.CompletedProcess, Path]:
    cfg = tmp_path / "net.yaml"
    cfg.write_text(yaml.safe_dump(NET))
    run_dir = tmp_path / name
    proc = subprocess.run([command("mpiexec"), "-n", "2", command("ert-run"), str(cfg), "--out", str(run_dir),
                           *extra], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})
    return proc, run_dir


def transfers(run_dir: Path) -> dict:
    doc = json.loads((run_dir / "ceilings.json").read_text())
    return {e["level"]: e for e in doc["ceilings"]["memory"] if e.get("kind") == "network"}, doc


@pytest.fixture(scope="module")
def intra(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The network run of two ranks on this one node, shared: read by one test, cut and resumed (a copy) by another."""
    return run2(tmp_path_factory.mktemp("net"), "intra")


def test_two_ranks_on_one_node_give_the_intra_node_level(intra):
    proc, run_dir = intra
    assert proc.returncode == 0, proc.stderr
    levels, doc = transfers(run_dir)
    assert list(levels) == ["net-intra-node"]
    e = levels["net-intra-node"]
    assert e["pairs"] == [[0, 1]] and e["variant"] == "p2p"
    assert e["gbytes_per_s"] > 0.01 and 0 < e["latency_us"] < 20000 and e["latency_bytes"] == 8  # loaded CI: loose
    assert e["rated"]["derivation"].startswith("no rated value: ranks on one node")
    assert "Links and network" in proc.stdout and "net-intra-node" in proc.stdout
    raw = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    recs = [r for r in raw if r["type"] == "transfer"]
    assert [r["bytes"] for r in recs] == [8, 128, 2048, 32768, 524288, 2097152]
    assert all(r["valid"] and r["repeats"] == 2 * r["round_trips"] for r in recs)


def test_the_node_override_gives_inter_node_and_injection_consistent_with_the_pair(tmp_path):
    proc, run_dir = run2(tmp_path, "inter", env={"ERT_TEST_NODE_ID": "rank%2"})
    assert proc.returncode == 0, proc.stderr
    levels, doc = transfers(run_dir)
    assert list(levels) == ["net-inter-node", "net-injection"]
    assert doc["metadata"]["network"]["node_override"] == "rank%2"
    assert any(w.startswith("TEST ONLY: node identity was overridden") for w in doc["warnings"])
    inter, inj = levels["net-inter-node"], levels["net-injection"]
    assert inter["pairs"] == [[0, 1]] and inj["pairs"] == [[0, 1]]
    # The aggregate is all senders' bytes over the slowest rank: never above the sum of each pair's own rate,
    # and one pair's stream moves the same bytes as its ping-pong, within a factor of a few.
    raw = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    for r in (r for r in raw if r.get("level") == "net-injection"):
        aggregate = r["moved_bytes"] * r["repeats"] / r["seconds"]["min"]
        per_pair = sum(r["bytes"] * r["repeats"] / s for s in r["pair_seconds_min"])
        assert aggregate <= per_pair * 1.001
    assert 0.1 < inj["gbytes_per_s"] / inter["gbytes_per_s"] < 10  # one pair: the same bytes, stream vs ping-pong


def test_a_cut_network_run_resumes_to_the_same_levels(intra, tmp_path):
    proc, finished = intra
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "cut"
    shutil.copytree(finished, run_dir)
    raw_path = run_dir / "raw.jsonl"
    lines = raw_path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"net-intra-node:p2p:0-1:2097152"' not in line]
    raw_path.write_text("".join(kept[:-1]) + kept[-1][:20])  # one size gone, a torn last line
    proc = subprocess.run([command("mpiexec"), "-n", "2", command("ert-run"), "--resume", str(run_dir), "-q"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    levels, _ = transfers(run_dir)
    assert list(levels) == ["net-intra-node"]
    ids = [json.loads(line)["id"] for line in raw_path.read_text().splitlines()
           if '"type":"transfer"' in line]
    assert sorted(set(ids)) == sorted(f"net-intra-node:p2p:0-1:{s}" for s in (8, 128, 2048, 32768, 524288, 2097152))
