"""Rank placement (ert/measure/placement.py) and the other pure pieces of running under MPI: the merge of the
ranks' warnings and the serial stand-in (ert/measure/comm.py), the fault-injection spec (ert/measure/faults.py).
On plain values and a fake sysfs; tests/test_mpi.py runs them for real under mpiexec."""

from __future__ import annotations

from pathlib import Path

import pytest

from ert.errors import ErtError
from ert.measure import placement
from ert.measure.comm import SerialComm, merge_rank_warnings
from ert.measure.faults import parse


def fake_sysfs(root: Path, topology: dict[int, tuple[int, int]]) -> str:
    """cpuN/topology/{physical_package_id,core_id} for each cpu: (package, core)."""
    for cpu, (package, core) in topology.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
        (d / "core_id").write_text(f"{core}\n")
    return str(root)


def test_hyperthread_siblings_form_one_core(tmp_path):
    # 4 cores with 2 hyperthreads each, numbered the Linux way: cpu N and N+4 are siblings.
    sysfs = fake_sysfs(tmp_path, {c: (0, c % 4) for c in range(8)})
    assert placement.physical_cores(list(range(8)), sysfs) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_unreadable_topology_makes_each_cpu_its_own_core(tmp_path):
    assert placement.physical_cores([3, 1], str(tmp_path)) == [[1], [3]]


@pytest.mark.parametrize("n_cores, ranks, expected", [
    (8, 2, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (8, 4, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    (3, 2, [[0], [1, 2]]),
    (2, 2, [[0], [1]]),
])
def test_ranks_get_disjoint_contiguous_slices_covering_the_node(n_cores, ranks, expected):
    cores = [[c] for c in range(n_cores)]
    slices = [split_cpus(cores, r, ranks) for r in range(ranks)]
    assert slices == expected
    flat = [c for s in slices for c in s]
    assert sorted(flat) == list(range(n_cores)) and len(set(flat)) == len(flat)


def split_cpus(cores, rank, ranks):
    mine, warning = placement.split_cores(cores, local_rank=rank, local_size=ranks)
    assert warning is None
    return [c for core in mine for c in core]


def test_more_ranks_than_cores_share_cores_with_a_warning():
    mine, warning = placement.split_cores([[0], [1]], local_rank=2, local_size=3)
    assert mine == [[0]]
    assert "3 ranks" in warning and "2 usable core" in warning


def test_unbound_peers_are_split_and_a_launcher_binding_is_kept(tmp_path):
    sysfs = fake_sysfs(tmp_path, {c: (0, c) for c in range(4)})
    everyone = [0, 1, 2, 3]
    p = placement.decide(host="n1", rank=1, local_rank=1, local_size=2, mask=everyone,
                         peer_masks=[everyone, everyone], sysfs_root=sysfs)
    assert (p.how, p.cpus, p.omp_places()) == ("split", [2, 3], "{2},{3}")
    bound = placement.decide(host="n1", rank=1, local_rank=1, local_size=2, mask=[3],
                             peer_masks=[[0], [3]], sysfs_root=sysfs)
    assert (bound.how, bound.cpus, bound.warnings) == ("launcher", [3], [])
    overlapping = placement.decide(host="n1", rank=0, local_rank=0, local_size=2, mask=[0, 1],
                                   peer_masks=[[0, 1], [1, 2]], sysfs_root=sysfs)
    assert overlapping.how == "launcher" and "overlaps 1 other rank" in overlapping.warnings[0]


def test_a_single_rank_keeps_the_whole_mask(tmp_path):
    sysfs = fake_sysfs(tmp_path, {c: (0, c) for c in range(2)})
    p = placement.decide(host="h", rank=0, local_rank=0, local_size=1, mask=[0, 1], peer_masks=[[0, 1]],
                         sysfs_root=sysfs)
    assert (p.how, p.cpus) == ("whole node", [0, 1])


def test_rank_warnings_are_reported_once_and_tagged():
    merged = merge_rank_warnings([["same everywhere", "only 0"], ["same everywhere", "odd", "odd"],
                                  ["same everywhere", "odd"]])
    assert merged == ["same everywhere", "[rank 0] only 0", "[ranks 1,2] odd"]
    assert merge_rank_warnings([["alone"]]) == ["alone"]


def test_fault_spec_parsing():
    assert parse("rank=1,point=3") == (1, 3)
    for bad in ("rank=1", "rank=x,point=2", "rank=0,point=0", "node=1,point=2"):
        with pytest.raises(ErtError, match="ERT_INJECT_FAULT"):
            parse(bad)


def test_serial_stand_in_has_the_same_surface():
    comm = SerialComm()
    assert (comm.rank, comm.size, comm.local_rank, comm.local_size) == (0, 1, 0, 1)
    assert comm.allgather(5) == [5] and comm.bcast("x") == "x"
