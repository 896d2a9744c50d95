"""Tests of the run config: every fault is an ErtError naming file, key path and problem."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ert.config import schema as config_mod
from ert.config.schema import RunConfig, default_path, from_dict, load, with_overrides
from ert.config.errors import key_path
from ert.errors import ErtError

from conftest import CONFIGS


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(path: Path) -> ErtError:
    with pytest.raises(ErtError) as info:
        load(path)
    return info.value


def check_error(err: ErtError, path: Path, key: str | None, *words: str) -> None:
    assert err.path == str(path)
    assert err.key == key
    for word in words:
        assert word in err.message, f"{word!r} not in {err.message!r}"
    # The printed form is FILE: KEY: problem, on one line.
    text = str(err)
    assert text.startswith(f"{path}: " + (f"{key}: " if key else ""))
    assert "\n" not in text


# --------------------------------------------------------------------------- faults


def test_bad_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "backend: auto\nprecisions: [fp64]\nthreads: 2\nfma: both: on\noutput_dir: x\n")
    err = load_error(path)
    check_error(err, path, "line 4", "invalid YAML")


def test_unclosed_bracket_is_invalid_yaml(tmp_path):
    path = write(tmp_path, "precisions: [fp64, fp32\n")
    err = load_error(path)
    assert err.path == str(path)
    assert err.key.startswith("line ")
    assert "invalid YAML" in err.message


@pytest.mark.parametrize("text, key, words", [
    ("timing:\n  repeats: many\n", "timing.repeats", ["integer", "'many'"]),
    ("working_set:\n  min_bytes: 1.5\n", "working_set.min_bytes", ["integer", "1.5"]),
    ("precisions: fp64\n", "precisions", ["list", "'fp64'"]),
    ("working_set: 5\n", "working_set", []),
    ("timing:\n  min_seconds: fast\n", "timing.min_seconds", ["number", "'fast'"]),
])
def test_wrong_type(tmp_path, text, key, words):
    path = write(tmp_path, text)
    check_error(load_error(path), path, key, *words)


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, "backend: auto\nbakend: numba-cpu\n")
    check_error(load_error(path), path, "bakend", "unknown key")


def test_unknown_nested_key(tmp_path):
    path = write(tmp_path, "working_set:\n  min_bytes: 4096\n  max_byte: 8192\n")
    check_error(load_error(path), path, "working_set.max_byte", "unknown key")


def test_unknown_key_in_timing(tmp_path):
    path = write(tmp_path, "timing:\n  repeat: 3\n")
    check_error(load_error(path), path, "timing.repeat", "unknown key")


@pytest.mark.parametrize("key", ["min_bytes", "max_bytes", "compute_max_bytes"])
def test_negative_size(tmp_path, key):
    path = write(tmp_path, f"working_set:\n  {key}: -4096\n")
    check_error(load_error(path), path, f"working_set.{key}", "greater than 0", "-4096")


def test_zero_size(tmp_path):
    path = write(tmp_path, "working_set:\n  min_bytes: 0\n")
    check_error(load_error(path), path, "working_set.min_bytes", "greater than 0")


def test_inverted_sizes(tmp_path):
    path = write(tmp_path, "working_set:\n  min_bytes: 65536\n  max_bytes: 4096\n")
    check_error(load_error(path), path, "working_set", "max_bytes (4096)", "min_bytes (65536)")


def test_equal_sizes_are_fine(tmp_path):
    cfg = load(write(tmp_path, "working_set:\n  min_bytes: 65536\n  max_bytes: 65536\n"))
    assert cfg.working_set.min_bytes == cfg.working_set.max_bytes == 65536


@pytest.mark.parametrize("values, bad", [([1, 3], 3), ([2, 6, 8], 6), ([2048], 2048), ([0], 0), ([-2], -2),
                                         ([1024, 4096], 4096)])
def test_flops_not_a_power_of_two_up_to_1024(tmp_path, values, bad):
    path = write(tmp_path, f"flops_per_element: {values}\n")
    check_error(load_error(path), path, "flops_per_element", f"{bad} is not a power of two")


def test_flops_1024_is_the_largest_allowed(tmp_path):
    assert load(write(tmp_path, "flops_per_element: [1024, 1]\n")).flops_per_element == [1, 1024]


def test_repeated_flops(tmp_path):
    path = write(tmp_path, "flops_per_element: [2, 2]\n")
    check_error(load_error(path), path, "flops_per_element", "repeat")


def test_unknown_precision(tmp_path):
    path = write(tmp_path, "precisions: [fp64, fp128]\n")
    check_error(load_error(path), path, "precisions[1]", "'fp128'", "fp64")


def test_repeated_precision(tmp_path):
    path = write(tmp_path, "precisions: [fp32, fp32]\n")
    check_error(load_error(path), path, "precisions", "repeat")


def test_empty_precision_list(tmp_path):
    path = write(tmp_path, "precisions: []\n")
    check_error(load_error(path), path, "precisions", "at least 1")


@pytest.mark.parametrize("value", ["sometimes", "1", "[on]", "null"])
def test_bad_fma_value(tmp_path, value):
    path = write(tmp_path, f"fma: {value}\n")
    check_error(load_error(path), path, "fma", "'on', 'off' or 'both'")


@pytest.mark.parametrize("text, modes", [("on", [True]), ("off", [False]), ("both", [True, False]),
                                         ("'on'", [True]), ('"off"', [False])])
def test_fma_values_as_documented(tmp_path, text, modes):
    # YAML 1.1 reads a bare on/off as a boolean; the documented spelling must still work.
    cfg = load(write(tmp_path, f"fma: {text}\n"))
    assert cfg.fma_modes() == modes
    assert cfg.fma in ("on", "off", "both")


@pytest.mark.parametrize("value", ["0", "-1"])
def test_threads_not_positive(tmp_path, value):
    path = write(tmp_path, f"threads: {value}\n")
    check_error(load_error(path), path, "threads", "positive")


@pytest.mark.parametrize("value", ["many", "true", "2.5"])
def test_threads_wrong_type(tmp_path, value):
    path = write(tmp_path, f"threads: {value}\n")
    err = load_error(path)
    assert err.path == str(path) and err.key == "threads"


def test_threads_auto_and_int(tmp_path):
    assert load(write(tmp_path, "threads: auto\n")).threads == "auto"
    assert load(write(tmp_path, "threads: 3\n")).threads == 3


@pytest.mark.parametrize("key, value", [("growth", 1.0), ("growth", 4.5)])
def test_growth_bounds(tmp_path, key, value):
    path = write(tmp_path, f"working_set:\n  {key}: {value}\n")
    check_error(load_error(path), path, f"working_set.{key}")


@pytest.mark.parametrize("text, what", [("- fp64\n- fp32\n", "list"), ("42\n", "int"), ("just words\n", "str")])
def test_top_level_not_a_mapping(tmp_path, text, what):
    path = write(tmp_path, text)
    check_error(load_error(path), path, None, "top level must be a mapping", what)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    check_error(load_error(path), path, None, "no such file")


def test_directory(tmp_path):
    check_error(load_error(tmp_path), tmp_path, None, "directory")


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"backend: \xff\xfe\n")
    err = load_error(path)
    assert err.path == str(path) and "cannot read" in err.message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n# a document of comments\n"])
def test_empty_or_comment_only_file_is_refused(tmp_path, text):
    # Taken as the built-in defaults it would start a dense 918-point sweep, not even the packaged default.
    path = write(tmp_path, text)
    check_error(load_error(path), path, None, "config is empty")


def test_first_error_is_reported_with_a_key(tmp_path):
    # Two faults: one line, one key, never a pydantic dump.
    path = write(tmp_path, "threads: 0\ntiming:\n  repeats: 0\n")
    err = load_error(path)
    assert err.key in ("threads", "timing.repeats")
    assert "validation error" not in str(err).lower()


def test_from_dict_source_names_the_origin():
    with pytest.raises(ErtError) as info:
        from_dict({"nope": 1}, source="somewhere.yaml")
    assert str(info.value) == "somewhere.yaml: nope: unknown key"


# --------------------------------------------------------------------------- shipped configs


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    cfg = load(path)
    assert isinstance(cfg, RunConfig)
    # Every documented key is written out: no shipped config relies on a silent default for these.
    data = yaml.safe_load(path.read_text())
    assert {"backend", "precisions", "flops_per_element", "fma", "working_set", "timing"} <= set(data)


def test_packaged_default_validates_and_is_the_repository_default():
    path = default_path()
    assert path.is_file(), path
    cfg = load(path)
    assert cfg == load(CONFIGS / "default.yaml")
    assert cfg.backend == "auto" and cfg.threads == "auto"


# --------------------------------------------------------------------------- overrides and hash


def test_with_overrides_applies_and_ignores_none():
    base = RunConfig()
    cfg = with_overrides(base, backend="numba-cpu", threads=3, output_dir=None)
    assert cfg.backend == "numba-cpu" and cfg.threads == 3
    assert cfg.output_dir == base.output_dir
    assert base.backend == "auto" and base.threads == "auto"  # the original is untouched
    assert with_overrides(base) == base


def test_with_overrides_validates_again():
    with pytest.raises(ErtError) as info:
        with_overrides(RunConfig(), threads=0)
    assert info.value.path == "command line" and info.value.key == "threads"
    with pytest.raises(ErtError) as info:
        with_overrides(RunConfig(), bogus=1)
    assert info.value.key == "bogus"


def test_config_is_frozen():
    cfg = RunConfig()
    with pytest.raises(Exception):
        cfg.threads = 4


def test_sha256_is_stable_across_key_order_and_formatting(tmp_path):
    a = write(tmp_path, "backend: numba-cpu\nthreads: 2\nworking_set:\n  min_bytes: 4096\n  max_bytes: 65536\n"
                        "timing: {repeats: 3, min_seconds: 0.01}\n", "a.yaml")
    b = write(tmp_path, "# same, reordered\ntiming:\n  min_seconds: 0.010\n  repeats: 3\n"
                        "working_set: {max_bytes: 65536, min_bytes: 4096}\nthreads: 2\nbackend: numba-cpu\n",
              "b.yaml")
    ha, hb = load(a).sha256(), load(b).sha256()
    assert ha == hb
    assert len(ha) == 64 and int(ha, 16) >= 0


def test_sha256_covers_defaults_and_values(tmp_path):
    explicit = write(tmp_path, f"timing:\n  repeats: {RunConfig().timing.repeats}\n", "e.yaml")
    assert load(explicit).sha256() == RunConfig().sha256()  # a default written out is the same config
    changed = write(tmp_path, "timing:\n  repeats: 7\n", "c.yaml")
    assert load(changed).sha256() != RunConfig().sha256()
    assert with_overrides(RunConfig(), threads=2).sha256() != RunConfig().sha256()


def test_flops_are_sorted_so_order_does_not_change_the_hash():
    a = from_dict({"flops_per_element": [8, 1, 2]})
    b = from_dict({"flops_per_element": [1, 2, 8]})
    assert a.flops_per_element == [1, 2, 8]
    assert a.sha256() == b.sha256()


def test_to_dict_round_trips_through_yaml(tmp_path):
    cfg = load(CONFIGS / "tiny.yaml")
    path = write(tmp_path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    again = load(path)
    assert again == cfg and again.sha256() == cfg.sha256()


def test_key_path_rendering():
    assert key_path(("working_set", "min_bytes")) == "working_set.min_bytes"
    assert key_path(("precisions", 2)) == "precisions[2]"


# ---------------------------------------------------------------------------- bounds on every number (issue 35)
@pytest.mark.parametrize("text, key", [
    ("timing:\n  noise_threshold: .inf\n", "timing.noise_threshold"),
    ("timing:\n  max_point_seconds: .inf\n", "timing.max_point_seconds"),
    ("timing:\n  min_seconds: .nan\n", "timing.min_seconds"),
    ("sustain_seconds: .nan\n", "sustain_seconds"),
    ("rated:\n  dram_gbytes_per_s: .inf\n", "rated.dram_gbytes_per_s"),
    ("working_set:\n  max_bytes: 1.0e+400\n", "working_set.max_bytes"),
])
def test_floats_are_finite_at_validate(tmp_path, text, key):
    # These validated before and then failed at the header write (JSON has no inf or NaN).
    path = write(tmp_path, text)
    check_error(load_error(path), path, key, "finite")


@pytest.mark.parametrize("value", [str(1 << 50), str(1 << 64), "1" + "0" * 400])
def test_max_bytes_beyond_the_hosts_memory_is_refused_with_the_figure(tmp_path, value):
    memory = config_mod.host_memory_bytes()
    path = write(tmp_path, f"working_set:\n  max_bytes: {value}\n")
    err = load_error(path)
    check_error(err, path, "working_set.max_bytes", "exceeds this host's memory", str(memory))
    assert len(str(err)) < 250  # 400 digits are not echoed


def test_an_integer_too_large_for_a_float_is_one_line(tmp_path):
    # 10^400 as an integer was an OverflowError traceback where pydantic compares it with a float bound.
    path = write(tmp_path, "timing:\n  min_seconds: " + "1" + "0" * 400 + "\n")
    err = load_error(path)
    assert err.key == "timing.min_seconds" and "digits" in err.message and len(str(err)) < 250


@pytest.mark.parametrize("key", ["working_set", "transfer"])
@pytest.mark.parametrize("growth", [1.0000001, 1.001, 1.0099])
def test_growth_is_at_least_1_01(tmp_path, key, growth):
    path = write(tmp_path, f"{key}:\n  growth: {growth}\n")
    check_error(load_error(path), path, f"{key}.growth", "greater than or equal to 1.01")
    assert from_dict({key: {"growth": 1.01}})


def test_planned_points_are_limited(tmp_path):
    path = write(tmp_path, "thread_counts: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\nthreads: 16\n"
                           "working_set: {min_bytes: 1024, growth: 1.01}\n")
    err = load_error(path)
    assert err.key is None and f"more than {config_mod.MAX_PLANNED_POINTS}" in err.message


@pytest.mark.parametrize("text, key", [
    ("threads: 100000000000000000000\n", "threads"),
    ("thread_counts: [1, 100000000000]\n", "thread_counts"),
    ("opencl:\n  global_sizes: [100000000000000000000]\n", "opencl.global_sizes"),
    ("cuda:\n  blocks: [100000000000000000000]\n", "cuda.blocks"),
])
def test_counts_have_an_upper_bound(tmp_path, text, key):
    path = write(tmp_path, text)
    assert load_error(path).key == key


def test_an_error_quotes_at_most_80_characters_of_the_input(tmp_path):
    path = write(tmp_path, "precisions: [" + ", ".join(["fp64"] * 50) + ", fp99]\n")
    err = load_error(path)
    quoted = err.message.split("(got ", 1)[1] if "(got " in err.message else ""
    assert len(quoted) <= 81, err.message
    long_value = write(tmp_path, "fma: " + "x" * 500 + "\n", name="long.yaml")
    err = load_error(long_value)
    assert "x" * 81 not in str(err) and "..." in str(err)


def test_config_is_read_as_utf8_whatever_the_locale(tmp_path):
    import os
    import subprocess
    import sys

    path = write(tmp_path, "# Durchsatz in Größe: café\nthreads: 1\n")
    path.write_bytes(path.read_text().encode("utf-8"))
    env = dict(os.environ, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    code = f"from ert.config.schema import load; print(load({str(path)!r}).threads)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr[-300:]


def test_validate_prints_an_estimate_of_the_run_time(tmp_path):
    from conftest import run_cmd

    proc = run_cmd("ert", "validate", write(tmp_path, "working_set: {growth: 1.01}\nsustain_seconds: 60\n"))
    assert proc.returncode == 0, proc.stderr
    estimate = [line for line in proc.stdout.splitlines() if line.startswith("estimated run time: ")]
    assert estimate and (" min " in estimate[0] or " h " in estimate[0])


def test_validate_of_a_tiny_growth_answers_at_once(tmp_path):
    import time

    from conftest import run_cmd

    start = time.perf_counter()
    proc = run_cmd("ert", "validate", write(tmp_path, "working_set:\n  growth: 1.0000001\n"), timeout=30)
    assert proc.returncode == 2 and "working_set.growth" in proc.stderr
    assert time.perf_counter() - start < 10  # the old plan() took minutes over 10^8 working sets


def test_a_long_unknown_key_is_quoted_in_part(tmp_path):
    path = write(tmp_path, "y" * 500 + ": 1\n")
    err = load_error(path)
    assert err.message == "unknown key" and len(err.key) <= 80
