"""The run directory: new names, what counts as a run, resume only on the same hardware, the config round trip."""

from __future__ import annotations

import pytest

from ert import hwinfo
from ert.config import from_dict, load
from ert.errors import ErtError
from ert.measure import rundir
from ert.measure.metadata import run_header


class SerialComm:
    size, rank = 1, 0

    def allgather(self, value):
        return [value]


def meta(**overrides) -> dict:
    return {"cpu_model": "Test CPU 9000", "ranks": 1, "threads_per_rank": 4, "device": "", **overrides}


@pytest.fixture
def same_cpu(monkeypatch):
    monkeypatch.setattr(hwinfo, "cpu_model", lambda: "Test CPU 9000")


def test_resume_on_the_same_hardware_and_layout_is_allowed(same_cpu, tmp_path):
    rundir.refuse_other_hardware(meta(), tmp_path, threads=4, ranks=1)
    rundir.refuse_other_hardware(meta(device="GPU A"), tmp_path, threads=4, ranks=1, device="GPU A")


def test_resume_refused_on_another_cpu(same_cpu, tmp_path):
    with pytest.raises(ErtError) as exc:
        rundir.refuse_other_hardware(meta(cpu_model="Other CPU 1"), tmp_path, threads=4, ranks=1)
    assert exc.value.key == "--resume" and exc.value.path == str(tmp_path)
    assert "was measured on 'Other CPU 1', this is 'Test CPU 9000'; start a new run instead" in str(exc.value)


def test_resume_refused_on_another_device_before_the_cpu_is_compared(monkeypatch, tmp_path):
    monkeypatch.setattr(hwinfo, "cpu_model", lambda: "a different host CPU")
    with pytest.raises(ErtError, match="was measured on device 'GPU A', this is 'GPU B'"):
        rundir.refuse_other_hardware(meta(device="GPU A"), tmp_path, threads=4, ranks=1, device="GPU B")


def test_a_device_unknown_to_either_side_is_not_compared(same_cpu, tmp_path):
    rundir.refuse_other_hardware(meta(device=""), tmp_path, threads=4, ranks=1, device="GPU B")
    rundir.refuse_other_hardware(meta(device="GPU A"), tmp_path, threads=4, ranks=1, device="")


@pytest.mark.parametrize("ranks, threads", [(2, 4), (1, 2)])
def test_resume_refused_with_another_layout(same_cpu, tmp_path, ranks, threads):
    with pytest.raises(ErtError, match=rf"measured with 1 rank\(s\) x 4 thread\(s\), not {ranks} x {threads}"):
        rundir.refuse_other_hardware(meta(), tmp_path, threads=threads, ranks=ranks)


def test_holds_run_and_check_new(tmp_path):
    assert not rundir.holds_run(tmp_path)
    rundir.check_new(tmp_path / "absent")
    rundir.check_new(tmp_path)  # an empty directory takes a new run
    (tmp_path / "notes.txt").write_text("x")
    rundir.check_new(tmp_path)  # other files do not make a run
    for name in ("raw.jsonl", "config.yaml", "ceilings.json"):
        run = tmp_path / name.replace(".", "_")
        run.mkdir()
        (run / name).write_text("")
        assert rundir.holds_run(run)
        with pytest.raises(ErtError, match="already holds a run") as exc:
            rundir.check_new(run)
        assert exc.value.key == "--out"
    with pytest.raises(ErtError, match="exists and is not a directory"):
        rundir.check_new(tmp_path / "notes.txt")


def test_new_run_dir_never_reuses_a_name(tmp_path):
    first = rundir.new_run_dir(str(tmp_path))
    assert first.parent == tmp_path and not first.exists()
    first.mkdir()
    second = rundir.new_run_dir(str(tmp_path))
    if second.name.startswith(first.name):  # the same second: numbered
        assert second.name == f"{first.name}-2"
    assert second != first and not second.exists()


def test_config_round_trip_and_load_config(tmp_path):
    cfg = from_dict({"backend": "numba-cpu", "threads": 3, "precisions": ["fp32"]})
    rundir.create(tmp_path / "run", cfg)
    text = (tmp_path / "run" / rundir.CONFIG_NAME).read_text()
    assert text.startswith("# Resolved config of this run (ert-run --resume uses it)\n")
    assert load(tmp_path / "run" / rundir.CONFIG_NAME) == cfg
    with pytest.raises(ErtError, match=r"not a run directory \(no config.yaml and raw.jsonl\)"):
        rundir.load_config(tmp_path / "run")  # no raw.jsonl yet
    (tmp_path / "run" / "raw.jsonl").write_text("")
    assert rundir.load_config(tmp_path / "run") == cfg


class _Described:
    """A backend as the header sees it: its description only."""

    def describe(self):
        return {"name": "numba-cpu"}


def test_header_of_a_serial_run(tmp_path):
    cfg = from_dict({"backend": "numba-cpu", "threads": 2, "sweep": "dense"})
    header = run_header(cfg, backend=_Described(), comm=SerialComm(), placement=None,
                        rank_warnings=["one warning"], planned_points=17)
    assert header["planned_points"] == 17
    m = header["metadata"]
    assert m["ranks"] == 1 and m["threads_per_rank"] == 2 and m["rank_warnings"] == ["one warning"]
    assert sum(m["ranks_per_host"].values()) == 1
    assert "mpi_library" not in m and "placement" not in m
