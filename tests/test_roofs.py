"""Which roofs a roofline draws (ert/consumers/roofs.py): the basis rule of choose_basis."""

from __future__ import annotations

import pytest

from ert.consumers.roofs import choose_basis, memory_roofs
from ert.errors import ErtError


def _doc(*pairs) -> dict:
    memory = [{"level": "L1", "gbytes_per_s": 100.0 + i, "spread": 0.0, "wss_bytes": [1, 2], "n_points": 1,
               **({"precision": p} if p else {}), **({"access": a} if a else {})}
              for i, (p, a) in enumerate(pairs)]
    return {"ceilings": {"memory": memory, "compute": []}}


@pytest.mark.parametrize("present, asked, chosen", [
    # 1. the asked pair, when measured
    ([("fp32", "rw"), ("fp64", "rw")], ("fp64", "rw"), ("fp64", "rw")),
    # 2. else the same access in another precision, fp64 before fp32 before fp16
    ([("fp16", "rw"), ("fp32", "rw"), ("fp64", "ro")], ("fp64", "rw"), ("fp32", "rw")),
    ([("fp16", "rw"), ("fp64", "ro")], ("fp32", "rw"), ("fp16", "rw")),
    # 3. else the asked precision with the other access
    ([("fp32", "ro"), ("fp64", "ro")], ("fp64", "rw"), ("fp64", "ro")),
    # ... else any measured pair in the fixed order (precision first)
    ([("fp16", "ro"), ("fp32", "ro")], ("fp64", "rw"), ("fp32", "ro")),
    # 4. else the first pair present: schema 1.0 entries without precision or access
    ([(None, None)], ("fp64", "rw"), (None, None)),
])
def test_choose_basis_follows_its_rule(present, asked, chosen):
    assert choose_basis(_doc(*present), precision=asked[0], access=asked[1]) == chosen


def test_roofs_come_from_the_chosen_basis_only():
    roofs, _ = memory_roofs(_doc(("fp32", "rw"), ("fp64", "ro")), precision="fp64", access="rw")
    assert [(r.precision, r.access, r.gbytes_per_s) for r in roofs] == [("fp32", "rw", 100.0)]


def test_no_memory_ceilings_is_the_users_error():
    with pytest.raises(ErtError, match="no memory ceilings"):
        choose_basis({"ceilings": {"memory": [], "compute": []}})
