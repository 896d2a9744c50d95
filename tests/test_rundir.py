"""The run directory: new names, what counts as a run, resume only on the same hardware, the config round trip."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from ert.hardware import hwinfo
from ert.config.schema import from_dict, load
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
    assert rundir.refuse_other_hardware(meta(), tmp_path, threads=4, ranks=1) == []
    assert rundir.refuse_other_hardware(meta(device="GPU A", host=socket.gethostname()), tmp_path, threads=4,
                                        ranks=1, device="GPU A") == []


def test_resume_on_another_host_of_the_same_cpu_model_warns(same_cpu, tmp_path):
    warnings = rundir.refuse_other_hardware(meta(host="elsewhere-7"), tmp_path, threads=4, ranks=1)
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert f"was measured on host elsewhere-7, this is {socket.gethostname()} (the same CPU model" in warnings[0]


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
    """Only two known devices that differ refuse a resume; an unknown one on either side allows it, silently."""
    assert rundir.refuse_other_hardware(meta(device=""), tmp_path, threads=4, ranks=1, device="GPU B") == []
    assert rundir.refuse_other_hardware(meta(device="GPU A"), tmp_path, threads=4, ranks=1, device="") == []
    with pytest.raises(ErtError, match="was measured on device 'GPU A', this is 'GPU B'"):
        rundir.refuse_other_hardware(meta(device="GPU A"), tmp_path, threads=4, ranks=1, device="GPU B")


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


def test_claim_auto_never_reuses_a_name(tmp_path):
    first, lock1 = rundir.claim_auto(str(tmp_path))
    assert first.parent == tmp_path and first.is_dir()
    second, lock2 = rundir.claim_auto(str(tmp_path))
    if second.name.startswith(first.name):  # the same second: numbered
        assert second.name == f"{first.name}-2"
    assert second != first and second.is_dir()
    lock1.release()
    lock2.release()


def test_config_round_trip_and_load_config(tmp_path):
    cfg = from_dict({"backend": "numba-cpu", "threads": 3, "precisions": ["fp32"]})
    rundir.create(tmp_path / "run", cfg)
    text = (tmp_path / "run" / rundir.CONFIG_NAME).read_text()
    assert text.startswith("# Resolved config of this run (ert-run --resume uses it)\n")
    assert load(tmp_path / "run" / rundir.CONFIG_NAME) == cfg
    assert rundir.load_config(tmp_path / "run") == cfg
    with pytest.raises(ErtError, match=r"not a run directory \(no config.yaml and raw.jsonl\)"):
        rundir.load_config(tmp_path)


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


# ----------------------------------------------------------------------------- one run per directory
CLAIM = """
import sys, time
time.strftime = lambda fmt, *a: "20260101-000000"  # every process in the same second
from ert.measure import rundir
path, lock = rundir.claim_auto(sys.argv[1])
print(path.name, flush=True)
sys.stdin.read()  # hold it until the test is done
"""


def test_run_names_colliding_in_one_second_get_a_suffix_each(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", CLAIM, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    names = [proc.stdout.readline().strip() for proc in procs]
    for proc in procs:
        proc.communicate("")
    base = f"20260101-000000-{socket.gethostname().split('.')[0]}"
    assert sorted(names) == sorted([base, f"{base}-2", f"{base}-3", f"{base}-4"])


def test_out_is_checked_again_under_its_lock(tmp_path):
    run = tmp_path / "run"
    lock = rundir.claim_out(run)  # absent: created, and held
    assert run.is_dir()
    (run / "raw.jsonl").write_text("")
    lock.release()
    with pytest.raises(ErtError, match="already holds a run") as exc:
        rundir.claim_out(run)  # the first run's files are there once its lock is free
    assert exc.value.key == "--out"
    lock = rundir.claim_out(run, restart=True)  # nothing measured: --restart may start it afresh
    lock.release()
    (run / "raw.jsonl").write_text('{"type":"header"}\n')
    with pytest.raises(ErtError, match="holds measured records; continue it with --resume") as exc:
        rundir.claim_out(run, restart=True)
    assert exc.value.key == "--restart"


def _run_with_header(tmp_path, cfg, **meta_overrides):
    run = tmp_path / "run"
    rundir.create(run, cfg)
    header = {"type": "header", "raw_version": "1.0", "planned_points": 1,
              "metadata": {"ranks": 1, "threads_per_rank": cfg.threads, "config": cfg.to_dict(),
                           "config_sha256": cfg.sha256(), **meta_overrides}}
    (run / "raw.jsonl").write_text(json.dumps(header) + "\n")
    return run


def test_resume_refuses_a_config_yaml_that_is_not_the_headers_naming_the_key(tmp_path):
    cfg = from_dict({"backend": "numba-cpu", "threads": 2})
    run = _run_with_header(tmp_path, cfg)
    raw, notes = rundir.resume_state(run)
    assert raw.header["metadata"]["config_sha256"] == cfg.sha256() and notes == []
    edited = cfg.to_dict()
    edited["working_set"]["max_bytes"] *= 2
    edited["timing"]["repeats"] += 1
    rundir.write_config(from_dict(edited), run / rundir.CONFIG_NAME)
    with pytest.raises(ErtError) as exc:
        rundir.resume_state(run)
    assert exc.value.key == "timing.repeats" and exc.value.path == str(run / rundir.CONFIG_NAME)
    assert "(and working_set.max_bytes)" in str(exc.value) and "\n" not in str(exc.value)
    # A header with only the hash (no resolved config) is compared by the hash.
    with pytest.raises(ErtError, match=r"differs from the run's header \(config_sha256\)"):
        rundir.check_config(from_dict(edited), {"metadata": {"config_sha256": cfg.sha256()}}, path=run)


def test_resume_rebuilds_a_missing_config_yaml_from_the_header(tmp_path):
    cfg = from_dict({"backend": "numba-cpu", "threads": 2, "precisions": ["fp32"]})
    run = _run_with_header(tmp_path, cfg)
    (run / rundir.CONFIG_NAME).unlink()
    raw, notes = rundir.resume_state(run)
    assert raw is not None and "rebuilt from raw.jsonl's header" in notes[0]
    assert load(run / rundir.CONFIG_NAME) == cfg


@pytest.mark.parametrize("raw_text", [None, "", '{"type":"header","raw_ver'])
def test_a_run_that_ended_before_its_header_resumes_afresh(tmp_path, raw_text):
    cfg = from_dict({"backend": "numba-cpu", "threads": 2})
    run = tmp_path / "run"
    rundir.create(run, cfg)
    if raw_text is not None:
        (run / "raw.jsonl").write_text(raw_text)  # killed, or the disk filled, while the header was written
    raw, notes = rundir.resume_state(run)
    assert raw is None and "starting it afresh" in notes[0]
    (run / rundir.CONFIG_NAME).unlink()
    with pytest.raises(ErtError, match="not a run directory"):
        rundir.resume_state(run)
