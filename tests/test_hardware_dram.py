"""The host's rated DRAM bandwidth (ert/hardware/dram.py): SMBIOS memory devices, the user's value and its
precedence, the config key and the ert-run flag."""

from __future__ import annotations

import pytest

from ert.config.schema import from_dict
from ert.errors import ErtError
from ert.hardware import dram as dram_rated

from conftest import write_config

# A config of one small point: only resolved here, never run.
MICRO = {"backend": "numba-cpu", "precisions": ["fp64"], "flops_per_element": [1], "access": ["rw"],
         "working_set": {"min_bytes": 65536, "max_bytes": 131072, "growth": 2.0}, "threads": 1}


# Made-up dmidecode output (not copied from a machine): two DDR5 DIMMs, one empty slot.
DMI_SERVER = """# dmidecode 3.4
Getting SMBIOS data from sysfs.

Handle 0x0040, DMI type 17, 92 bytes
Memory Device
\tTotal Width: 80 bits
\tData Width: 64 bits
\tSize: 32 GB
\tLocator: DIMM_A1
\tType: DDR5
\tSpeed: 5600 MT/s
\tConfigured Memory Speed: 4800 MT/s

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
\tData Width: 64 bits
\tSize: No Module Installed
\tLocator: DIMM_A2
\tSpeed: Unknown

Handle 0x0042, DMI type 17, 92 bytes
Memory Device
\tData Width: 64 bits
\tSize: 32 GB
\tLocator: DIMM_B1
\tSpeed: 5600 MT/s
\tConfigured Memory Speed: 4800 MT/s
"""
DMI_GUEST = """Handle 0x1100, DMI type 17, 40 bytes
Memory Device
\tData Width: Unknown
\tSize: 16 GB
\tLocator: DIMM 0
\tSpeed: Unknown
\tManufacturer: Made Up Hypervisor
"""


def test_dmidecode_devices_give_channels_x_rate_x_width():
    devices = dram_rated.parse_dmidecode(DMI_SERVER)
    assert [d.locator for d in devices] == ["DIMM_A1", "DIMM_B1"]
    assert devices[0].mts == 4800 and devices[0].data_width_bits == 64  # configured, not the rated 5600
    gbps, how = dram_rated.rate_devices(devices)
    assert gbps == pytest.approx(76.8)
    assert how.startswith("2 populated memory device(s) x 4800 MT/s x 8 B per transfer (SMBIOS type 17")


def test_a_vm_guests_devices_without_speed_are_no_rating():
    gbps, how = dram_rated.rate_devices(dram_rated.parse_dmidecode(DMI_GUEST))
    assert gbps is None and "not their transfer rate" in how
    assert dram_rated.rate_devices([])[0] is None


def test_dram_precedence_user_then_smbios_then_why_not():
    user = dram_rated.dram_entry(user_gbps=90.0, smbios_text=DMI_SERVER)
    assert user["gbytes_per_s"] == 90.0 and "given by the user" in user["derivation"]
    assert "SMBIOS gives 76.8 GB/s" in user["derivation"] and user["scope"] == "host"
    assert dram_rated.dram_entry(user_gbps=None, smbios_text=DMI_SERVER)["gbytes_per_s"] == 76.8
    none = dram_rated.dram_entry(user_gbps=None, smbios_text=None, smbios_why="dmidecode is not installed")
    assert none["gbytes_per_s"] is None
    assert none["derivation"] == ("no rated value: dmidecode is not installed and the config has no "
                                  "rated.dram_gbytes_per_s (or pass ert-run --rated-dram GBPS)")


def test_the_configs_rated_dram_is_validated_and_absent_by_default():
    assert from_dict({"rated": {"dram_gbytes_per_s": 120}}).rated.dram_gbytes_per_s == 120.0
    assert "rated" not in from_dict({}).to_dict()  # older configs keep their hash
    with pytest.raises(ErtError) as err:
        from_dict({"rated": {"dram_gbytes_per_s": -3}}, source="run.yaml")
    assert "run.yaml" in str(err.value) and "rated.dram_gbytes_per_s" in str(err.value)
    with pytest.raises(ErtError, match="rated.dram_gbps"):
        from_dict({"rated": {"dram_gbps": 3}}, source="run.yaml")


def test_the_rated_dram_flag_overrides_the_config(tmp_path):
    import argparse

    from ert.cli.prepare import new_run
    from ert.cli.run import _add_run_arguments

    cfg = write_config(tmp_path / "c.yaml", dict(MICRO, rated={"dram_gbytes_per_s": 50}), backend="numba-cpu")
    parser = argparse.ArgumentParser()
    _add_run_arguments(parser)
    for argv, want in (([], 50.0), (["--rated-dram", "75.5"], 75.5)):
        args = parser.parse_args([str(cfg), "--out", str(tmp_path / f"run{len(argv)}")] + argv)
        resolved, _ = new_run(args, None)
        assert resolved.rated.dram_gbytes_per_s == want
    with pytest.raises(SystemExit):
        parser.parse_args(["--rated-dram", "0"])
