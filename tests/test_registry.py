"""Tests of the backend registry: every backend is listed, loadable or not, with the reason."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from ert.backends import REGISTRY, BackendEntry, Registry
from ert.errors import ErtError

GHOST = BackendEntry("ghost-gpu", "ert.backends.no_such_module_xyz", "a backend whose module does not exist")


@pytest.fixture
def fake_backends(tmp_path, monkeypatch):
    """Two importable backend modules: one that says it is unavailable, one that works."""
    (tmp_path / "ert_fake_off.py").write_text(textwrap.dedent('''
        def probe():
            return False, "no device found (driver 0.0)", {}

        def create(**options):
            raise AssertionError("create() must not be called on an unavailable backend")
    '''))
    (tmp_path / "ert_fake_on.py").write_text(textwrap.dedent('''
        class Fake:
            name = "fake-on"
            def __init__(self, **options):
                self.options = options

        def probe():
            return True, "", {"fakelib": "1.2.3"}

        def create(**options):
            return Fake(**options)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("ert_fake_off", "ert_fake_on"):
        sys.modules.pop(name, None)


def test_missing_module_is_listed_as_unavailable_with_the_reason():
    reg = Registry([GHOST])
    assert reg.names() == ["ghost-gpu"]
    st = reg.status("ghost-gpu")
    assert st.available is False
    assert "cannot load" in st.reason
    assert "no_such_module_xyz" in st.reason
    assert "ModuleNotFoundError" in st.reason


def test_create_of_a_missing_module_raises_ert_error_with_the_reason():
    reg = Registry([GHOST])
    with pytest.raises(ErtError) as info:
        reg.create("ghost-gpu", threads=1)
    text = str(info.value)
    assert "ghost-gpu" in text and "not available" in text
    assert "no_such_module_xyz" in text
    assert info.value.key == "backend"


def test_best_available_skips_the_unavailable(fake_backends):
    reg = Registry([GHOST, BackendEntry("fake-off", "ert_fake_off", "off"), BackendEntry("fake-on", "ert_fake_on", "on")])
    assert reg.best_available() == "fake-on"
    assert reg.names() == ["ghost-gpu", "fake-off", "fake-on"]  # registry order is kept


def test_best_available_with_nothing_available_names_every_reason(fake_backends):
    reg = Registry([GHOST, BackendEntry("fake-off", "ert_fake_off", "off")])
    with pytest.raises(ErtError) as info:
        reg.best_available()
    text = str(info.value)
    assert "no backend is available" in text
    assert "ghost-gpu: cannot load" in text
    assert "fake-off: no device found (driver 0.0)" in text


def test_probe_saying_unavailable(fake_backends):
    reg = Registry([BackendEntry("fake-off", "ert_fake_off", "off")])
    st = reg.status("fake-off")
    assert (st.available, st.reason) == (False, "no device found (driver 0.0)")
    with pytest.raises(ErtError, match="no device found"):
        reg.create("fake-off")


def test_available_backend_is_created_with_options(fake_backends):
    reg = Registry([BackendEntry("fake-on", "ert_fake_on", "on")])
    st = reg.status("fake-on")
    assert st.available and st.detail == {"fakelib": "1.2.3"}
    backend = reg.create("fake-on", threads=3)
    assert backend.name == "fake-on" and backend.options == {"threads": 3}


def test_unknown_name():
    reg = Registry([GHOST])
    for call in (reg.status, reg.entry, reg.create):
        with pytest.raises(ErtError) as info:
            call("nosuch")
        assert "unknown backend 'nosuch'" in str(info.value)
        assert "ghost-gpu" in str(info.value)  # the known names are listed


def test_module_that_fails_on_import_is_still_listed(tmp_path, monkeypatch):
    (tmp_path / "ert_fake_broken.py").write_text("raise RuntimeError('CUDA driver too old')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry([BackendEntry("broken", "ert_fake_broken", "x")])
    try:
        st = reg.status("broken")
    finally:
        sys.modules.pop("ert_fake_broken", None)
    assert not st.available
    assert "RuntimeError" in st.reason and "CUDA driver too old" in st.reason


def test_the_real_registry_has_numba_cpu_available():
    assert "numba-cpu" in REGISTRY.names()
    st = REGISTRY.status("numba-cpu")
    assert st.available, st.reason
    assert "numba" in st.detail and "llvmlite" in st.detail
    assert REGISTRY.best_available() == "numba-cpu"


def test_a_device_backend_with_only_cpu_devices_yields_to_the_cpu_backend(tmp_path, monkeypatch):
    (tmp_path / "ert_fake_ocl.py").write_text(textwrap.dedent('''
        import os
        def probe():
            return True, "", {"accelerators": int(os.environ.get("FAKE_ACCELERATORS", "0"))}
    '''))
    (tmp_path / "ert_fake_cpu.py").write_text("def probe():\n    return True, '', {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry([BackendEntry("dev", "ert_fake_ocl", "device", host_threads=False),
                    BackendEntry("cpu", "ert_fake_cpu", "cpu")])
    only_dev = Registry([BackendEntry("dev", "ert_fake_ocl", "device", host_threads=False)])
    try:
        assert reg.best_available() == "cpu"           # a CPU seen through OpenCL: the CPU backend is better
        assert only_dev.best_available() == "dev"      # but it still serves when nothing else can
        monkeypatch.setenv("FAKE_ACCELERATORS", "1")
        assert reg.best_available() == "dev"           # a real accelerator comes first
    finally:
        sys.modules.pop("ert_fake_ocl", None)
        sys.modules.pop("ert_fake_cpu", None)


def test_a_device_backend_that_knows_it_has_no_accelerator_is_probed_only_when_nothing_else_serves(tmp_path,
                                                                                                      monkeypatch):
    """OpenCL's probe builds a kernel on every device (0.3 s of a bare run's first line on the Zen 4 guest): where
    its module says at no cost that no accelerator exists, a bare run does not probe it while the CPU backend
    serves; with nothing else it is probed, and serves."""
    (tmp_path / "ert_fake_ocl2.py").write_text(textwrap.dedent('''
        import os
        probed = []
        def no_accelerators():
            return os.environ.get("FAKE_NODES") is None
        def probe():
            probed.append(1)
            return True, "", {"accelerators": 0 if os.environ.get("FAKE_NODES") is None else 1}
    '''))
    (tmp_path / "ert_fake_cpu2.py").write_text("def probe():\n    return True, '', {}\n")
    (tmp_path / "ert_fake_cpu_off.py").write_text("def probe():\n    return False, 'no cpu', {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    dev = BackendEntry("dev", "ert_fake_ocl2", "device", host_threads=False)
    try:
        probed = importlib.import_module("ert_fake_ocl2").probed
        assert Registry([dev, BackendEntry("cpu", "ert_fake_cpu2", "cpu")]).best_available() == "cpu"
        assert probed == []
        assert Registry([dev, BackendEntry("cpu", "ert_fake_cpu_off", "cpu")]).best_available() == "dev"
        assert probed == [1]
        monkeypatch.setenv("FAKE_NODES", "1")  # a device node: probed first, and its accelerator wins
        assert Registry([dev, BackendEntry("cpu", "ert_fake_cpu2", "cpu")]).best_available() == "dev"
    finally:
        for name in ("ert_fake_ocl2", "ert_fake_cpu2", "ert_fake_cpu_off"):
            sys.modules.pop(name, None)


def test_opencl_knows_there_is_no_accelerator_from_the_device_nodes(tmp_path, monkeypatch):
    from ert.backends import opencl_devices

    monkeypatch.setattr(opencl_devices, "ACCELERATOR_NODES", (str(tmp_path / "renderD*"), str(tmp_path / "kfd")))
    assert opencl_devices.no_accelerators() == sys.platform.startswith("linux")
    (tmp_path / "kfd").touch()
    assert opencl_devices.no_accelerators() is False


def test_every_backend_is_created_with_the_same_keywords_and_a_wrong_one_fails():
    """REGISTRY.create's contract: threads, options, local_rank, local_size and nothing else; a misspelt or
    retired keyword (benchmarks/opencl_vs_numba.py once passed config=) is a TypeError, never dropped."""
    import importlib
    import inspect

    for name in REGISTRY.names():
        create = importlib.import_module(REGISTRY.entry(name).module).create
        params = inspect.signature(create).parameters
        assert set(params) == {"threads", "options", "local_rank", "local_size"}, name
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values()), name
    from ert.backends import numba_cpu

    with pytest.raises(TypeError, match="config"):
        numba_cpu.create(threads=1, config={"opencl": {}})
    with pytest.raises(TypeError, match="no backend options"):
        numba_cpu.create(threads=1, options={"cpu_reference": False})
