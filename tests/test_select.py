"""Backend selection: --device applied to the opencl or cuda options, and thread counts resolved per backend."""

from __future__ import annotations

import pytest

from ert.cli import select
from ert.cli.run import _thread_counts
from ert.config.schema import from_dict
from ert.errors import ErtError


def cfg(backend: str, **data):
    return from_dict({"backend": backend, **data})


@pytest.mark.parametrize("selector, expected", [
    ("gpu", {"device_type": "gpu"}),
    ("2", {"device": 2}),
    ("Portable:1", {"platform": "Portable", "device": 1}),
    ("0:", {"platform": 0, "device": None}),
    ("Quadro", {"device": "Quadro"}),
])
def test_opencl_selector_sets_the_opencl_options(selector, expected):
    out = select.with_device(cfg("opencl"), selector)
    assert {k: getattr(out.opencl, k) for k in expected} == expected
    assert out.backend == "opencl"


def test_cuda_takes_a_gpu_index():
    assert select.with_device(cfg("cuda"), " 3 ").cuda.device == 3
    with pytest.raises(ErtError, match="the cuda backend takes a GPU index, not 'gpu'") as exc:
        select.with_device(cfg("cuda"), "gpu")
    assert exc.value.key == "--device"


def test_other_backends_take_no_device():
    with pytest.raises(ErtError, match="applies to the opencl and cuda backends, not 'numba-cpu'"):
        select.with_device(cfg("numba-cpu"), "0")


def test_resolve_keeps_cpu_threads_and_gives_device_backends_one_host_thread():
    assert select.resolve(cfg("numba-cpu", threads=3), source="x.yaml", backend_flag=False).threads == 3
    assert select.resolve(cfg("cuda", threads=8), source="x.yaml", backend_flag=False).threads == 1


def test_resolve_auto_threads_follow_the_placement():
    class Placement:
        threads = 5

    out = select.resolve(cfg("numba-cpu", threads="auto"), source="x.yaml", backend_flag=False,
                         placement=Placement())
    assert out.threads == 5


def test_resolve_names_where_an_unknown_backend_came_from():
    with pytest.raises(ErtError) as exc:
        select.resolve(cfg("nosuch"), source="x.yaml", backend_flag=False)
    assert (exc.value.path, exc.value.key) == ("x.yaml", "backend")
    with pytest.raises(ErtError) as exc:
        select.resolve(cfg("nosuch"), source="x.yaml", backend_flag=True)
    assert (exc.value.path, exc.value.key) == (None, "--backend")


def test_thread_scaling_is_refused_on_a_device_backend():
    with pytest.raises(ErtError, match="thread scaling measures CPU threads; backend 'opencl'"):
        select.resolve(cfg("opencl", threads=4, thread_counts=[2, 4]), source="x.yaml", backend_flag=False)


def test_thread_counts_parse():
    assert _thread_counts("2") == 2
    assert _thread_counts("2,1") == [1, 2]
