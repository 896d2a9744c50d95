"""Levels that cannot be (ert.analysis.memory): precisions of one access apart, a level above the one before."""

from __future__ import annotations

from ert.analysis.memory import consistency_warnings, inversion_warnings, precision_warnings


def _entry(level, precision, access, gbs):
    return {"level": level, "precision": precision, "access": access, "gbytes_per_s": gbs}


def test_the_same_bytes_at_two_rates_name_both_precisions():
    # Zen 5, one run: read-only DRAM 53 GB/s on one precision and 90 on the other.
    changed = [_entry("L3", "fp64", "ro", 240.0), _entry("L3", "fp32", "ro", 236.0),
               _entry("DRAM", "fp64", "ro", 53.0), _entry("DRAM", "fp32", "ro", 90.0)]
    (warning,) = precision_warnings(changed, 0.10)
    assert warning.code == "precisions-disagree"
    assert warning.startswith("DRAM fp32 read-only 90 GB/s against fp64 read-only 53 GB/s: the same bytes at 1.70x")
    assert "beyond the noise threshold (10%)" in warning and "measure again" in warning
    # Within the threshold: nothing to say, whatever the level; a wider threshold lets more pass.
    same = [_entry("L2", "fp64", "rw", 434.0), _entry("L2", "fp32", "rw", 452.0),
            _entry("DRAM", "fp64", "rw", 55.5), _entry("DRAM", "fp32", "rw", 60.0)]
    assert precision_warnings(same, 0.10) == []
    assert precision_warnings(changed, 0.75) == []
    # Three precisions: one warning naming the fastest and the slowest.
    three = [_entry("L1", "fp64", "rw", 460.0), _entry("L1", "fp32", "rw", 420.0), _entry("L1", "int32", "rw", 300.0)]
    (warning,) = precision_warnings(three, 0.10)
    assert "L1 fp64 read+write 460 GB/s against int32 read+write 300 GB/s" in warning


def test_a_level_faster_than_the_level_above_it_is_named_with_it():
    # The Zen 4 newcomer's fp64 read+write: L1 359 (its confirmed rate) below L2 449; fp32 in order.
    curve = [_entry("L1", "fp64", "rw", 359.0), _entry("L2", "fp64", "rw", 449.2), _entry("L3", "fp64", "rw", 360.3),
             _entry("DRAM", "fp64", "rw", 60.6), _entry("L1", "fp32", "rw", 461.0), _entry("L2", "fp32", "rw", 391.9)]
    (warning,) = inversion_warnings(curve, 0.10, "DRAM")
    assert warning.code == "level-inverted"
    assert warning.startswith("fp64 read+write L2 449.2 GB/s reads faster than its L1 359 GB/s")
    # Within the threshold (L2 1 % above L1), an extra level (L2b) or a missing one: no warning, or the next pair.
    close = [_entry("L1", "fp64", "rw", 444.2), _entry("L2", "fp64", "rw", 449.2)]
    assert inversion_warnings(close, 0.10, "DRAM") == []
    gap = [_entry("L1", "fp64", "ro", 400.0), _entry("L2b", "fp64", "ro", 900.0), _entry("L3", "fp64", "ro", 190.0),
           _entry("HBM", "fp64", "ro", 250.0)]
    (warning,) = inversion_warnings(gap, 0.10, "HBM")
    assert "HBM 250 GB/s reads faster than its L3 190 GB/s" in warning
    # In a DRAM run "HBM" is no level; the newcomer's L1 and L2 are also apart between fp32 and fp64 (1.28x, 1.15x).
    assert [w.code for w in consistency_warnings(curve + gap, 0.10, "DRAM")] == ["precisions-disagree"] * 2 + [
        "level-inverted"]
