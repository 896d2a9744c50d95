"""The precision policy: unsupported precisions dropped with the backend's reason, or a run refused."""

from __future__ import annotations

import pytest

from ert.config.schema import from_dict
from ert.errors import ErtError
from ert.measure.precisions import supported_precisions


class Backend:
    def __init__(self, runs):
        self.runs = set(runs)
        self.asked = []

    def supports(self, spec) -> bool:
        self.asked.append(spec.precision)
        return spec.precision in self.runs

    def unsupported_reason(self, precision: str) -> str:
        return f"no {precision} here"


def cfg(*precisions):
    return from_dict({"backend": "numba-cpu", "precisions": list(precisions)})


def test_all_supported_keeps_the_config_and_warns_nothing():
    config = cfg("fp64", "fp32")
    assert supported_precisions(config, Backend({"fp64", "fp32"})) == (config, None)


def test_unsupported_ones_are_dropped_with_the_backends_reasons():
    backend = Backend({"fp32"})
    config, warning = supported_precisions(cfg("fp64", "fp32", "fp16"), backend)
    assert config.precisions == ["fp32"]
    assert warning == "no fp64 here; no fp16 here: its fp64, fp16 points are skipped"
    assert backend.asked == ["fp64", "fp32", "fp16"]


def test_nothing_left_is_an_error_on_precisions():
    with pytest.raises(ErtError) as exc:
        supported_precisions(cfg("fp16"), Backend({"fp64"}))
    assert exc.value.key == "precisions"
    assert str(exc.value) == ("precisions: no fp16 here, and nothing else was asked for; choose another backend, "
                              "device or precision")
