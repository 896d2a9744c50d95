"""Command line: `ert` (run, validate, backends, analyze, show and the consumers) and the `ert-run` entry point.

Only argparse and ert.errors are imported at module level, so `ert --help`
stays instant; every subcommand imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ert.cli.consumers import _add_consumer_parsers
from ert.cli.run import QuietExit, _add_run_arguments, cmd_run
from ert.errors import ErtError, any_locale_streams, interrupts_reach_main, not_a_file_name
from ert.hardware import no_rated_text

VERBOSE_HELP = ("the report in full: every warning whole, every derivation, the tables as separate groups; the "
                "default fits a screen")


# ---------------------------------------------------------------------------- ert subcommands
def cmd_validate(args) -> int:
    from ert.config import schema as config_mod
    from ert.hardware import hwinfo
    from ert.measure.plan import kernel_specs, plan

    cfg = config_mod.load(args.config)
    threads = hwinfo.usable_cpus() if cfg.threads == "auto" else cfg.threads
    specs = kernel_specs(cfg)
    # Tensor kernels depend on the GPU (which instructions it has, its SMs): counted apart, never planned here.
    tensor = (f"; plus tensor kernels {', '.join(cfg.tensor)} (on the GPU: wgmma and mma.sync on sm_90, one point "
              f"per launch geometry)") if cfg.tensor else ""
    if not cfg.precisions:  # a tensor-only run (precisions: []): nothing to plan without the GPU
        print(f"{args.config}: valid: a tensor-only run (no vector kernels){tensor.replace('; plus', ':', 1)}")
        return 0
    cfg = config_mod.with_overrides(cfg, tensor=[]) if cfg.tensor else cfg
    # The dense grid as this machine would plan it: device backends by their own
    # geometry (noted below), the CPU backend by this CPU's vector width and the
    # chain counts it sweeps, worked out without importing numba.
    if cfg.backend in ("numba-cpu", "auto"):
        from ert.backends.numba_codegen import Geometry

        geometry = Geometry.of_host()
        points = plan(cfg, workers=threads, granule_elements_of=geometry.granule_elements,
                      launches_of=geometry.launches)
    else:
        points = plan(cfg, workers=threads, granule_elements_of=lambda spec: 512 // spec.itemsize)
    sizes = len({p.wss_bytes for p in points})
    counted = (f"at most {len(points)} points (adaptive: it measures where levels change, usually far fewer)"
               if cfg.sweep == "adaptive" else f"{len(points)} points")
    scaling = f" per thread count ({', '.join(map(str, cfg.thread_counts))})" if cfg.thread_counts else ""
    print(f"{args.config}: valid: {len(specs)} kernel variant(s) x up to {sizes} working set(s): {counted}"
          f"{scaling} per rank layout (threads: {cfg.threads}, backend: {cfg.backend}){_geometry_note(cfg)}{tensor}")
    print(_time_estimate(cfg, len(points)))
    return 0


def _time_estimate(cfg, points: int) -> str:
    """A rough run time: each point is calibrated (about one region) and timed ``min_repeats`` (quiet) to
    ``repeats`` regions of ``min_seconds``; a noisy one is measured again up to ``max_remeasure`` times."""
    t = cfg.timing
    runs = len(cfg.thread_counts or [1])
    low = points * runs * ((t.min_repeats or t.repeats) + 1) * t.min_seconds
    high = points * runs * (t.repeats + 1) * t.min_seconds * (1 + t.max_remeasure)
    if t.max_point_seconds is not None:
        high = min(high, points * runs * (t.max_point_seconds + t.min_seconds))
    hold = 2 * cfg.sustain_seconds if cfg.sustain_seconds else 0.0  # the FP64 peak and DRAM points
    span = f"{_duration(low + hold)} to {_duration(max(low, high) + hold)}"
    adaptive = " (adaptive: usually less)" if cfg.sweep == "adaptive" else ""
    return (f"estimated run time: {span} of timed regions{adaptive}, plus compiling the kernels "
            f"and the transfer levels")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _geometry_note(cfg) -> str:
    """How launch geometries multiply the points of a device backend (they depend on the device when not given)."""
    if cfg.backend == "cuda":
        c = cfg.cuda
        if c.blocks and c.threads_per_block:
            allowed = set(c.blocks_threads) if c.blocks_threads else None
            n = sum(1 for b in c.blocks for t in c.threads_per_block if allowed is None or b * t in allowed)
            return f", each at up to {n} blocks x threads geometries"
        return ", each at the blocks x threads geometries chosen from the GPU's SM count"
    if cfg.backend == "opencl":
        o = cfg.opencl
        if o.global_sizes and o.local_sizes:
            return f", each at up to {len(o.global_sizes) * len(o.local_sizes)} global x local size geometries"
        return ", each at the global x local size geometries chosen from the device"
    from ert.backends.numba_codegen import Geometry

    chains = "/".join(map(str, Geometry.of_host().chains))
    return f" (numba-cpu: compute kernels each at {chains} FMA chains per thread)"


def cmd_backends(args) -> int:
    from ert.backends import REGISTRY

    for name in REGISTRY.names():
        st = REGISTRY.status(name)
        if st.available:
            devices = st.detail.get("devices")
            listed = devices if isinstance(devices, list) else []  # cuda reports a count, opencl one line each
            versions = ", ".join(f"{k} {v}" for k, v in st.detail.items() if not (k == "devices" and listed))
            print(f"{name:12s} available    {versions}")
            # A device backend lists every device it sees, one per line (with why, where one is unusable).
            for line in listed:
                print(f"{'':12s}   device    {line}")
        else:
            print(f"{name:12s} unavailable  {st.reason}")
    return 0


def cmd_analyze(args) -> int:
    import json

    from ert.analysis.ceilings import build
    from ert.records.ceilings_io import validate, write_ceilings
    from ert.records.rawio import read_raw
    from ert.consumers.terminal.report import format_ceilings

    from ert.interop.ert_raw import looks_like_ert_results, read_ert_results

    # An ERT results run (FLOPS.NNN/MPI.NNNN/OpenMP.NNNN/max) is analysed like an ert run.
    raw = read_ert_results(args.raw) if looks_like_ert_results(Path(args.raw)) else read_raw(args.raw)
    if args.cache:
        raw.header["metadata"]["caches_reported"] = [_cache_hint(text) for text in args.cache]
        raw.header["metadata"].get("backend_info", {}).pop("caches", None)
    _complete_rated(raw.header["metadata"])
    doc = build(raw)
    validate(doc, path=args.raw)  # a fault in what the analysis built names the input, not only a key
    if args.save_raw:
        from ert.records.files import check_writable
        from ert.records.rawio import write_raw

        if args.output:
            check_writable(args.output)  # a bad -o fails before --save-raw writes anything

        try:
            write_raw(raw, args.save_raw)
        except ErtError as exc:
            raise ErtError(exc.message, path=args.save_raw, key="--save-raw") from None
    if args.output:
        write_ceilings(doc, args.output)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(format_ceilings(doc, verbose=args.verbose))
        if args.output:
            print(f"\nceilings: {args.output}")
    return 0


def _complete_rated(meta: dict) -> None:
    """A CPU run made before ert rated L2 and L3 gets them from the same table and measured clock (in place)."""
    from ert.hardware.cpu import complete_rated

    info = meta.get("backend_info")
    if isinstance(info, dict) and isinstance(info.get("rated"), dict):
        info["rated"] = complete_rated(info["rated"])
        memory = info["rated"].setdefault("memory", [])
        if info["rated"].get("per_core") and not any(m.get("level") == "DRAM" for m in memory):
            memory.append({"level": "DRAM", "access": None, "scope": "host", "gbytes_per_s": None,
                           "derivation": no_rated_text("the run recorded none (made before ert rated DRAM; "
                                         "rated.dram_gbytes_per_s or ert-run --rated-dram gives one)")})


def _cache_hint(text: str) -> dict:
    """``LEVEL:SIZE[:SHARED_BY]`` (e.g. ``3:8M:4``) as a cache record; a one-line error otherwise."""
    from ert.hardware.hwinfo import parse_size_bytes

    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        level, size = int(parts[0]), parse_size_bytes(parts[1])
        shared = int(parts[2]) if len(parts) == 3 else 1
        if level < 1 or size < 1 or shared < 1:
            raise ValueError
    except ValueError:
        raise ErtError(f"expected LEVEL:SIZE[:SHARED_BY] such as 2:256K or 3:8M:4, got {text!r}", key="--cache") from None
    return {"level": level, "kind": "Data" if level == 1 else "Unified", "size_bytes": size, "shared_cpu_count": shared}


def cmd_show(args) -> int:
    from ert.interop.ert_results import load_any_ceilings
    from ert.consumers.terminal.report import format_ceilings
    from ert.records.files import CEILINGS_NAME

    path = Path(args.ceilings)
    if path.is_dir():
        ert_file = path / "roofline.json"  # an ERT results run directory
        path = ert_file if not (path / CEILINGS_NAME).exists() and ert_file.exists() else path / CEILINGS_NAME
    print(format_ceilings(load_any_ceilings(path), verbose=args.verbose))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from ert import __version__

    parser = argparse.ArgumentParser(
        prog="ert", description="Empirical Roofline Toolkit: measure and use a machine's bandwidth and FLOP/s ceilings.")
    parser.add_argument("--version", action="version", version=f"ert {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("run", help="run a sweep (same as ert-run)")
    _add_run_arguments(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a run config and print what it would measure")
    p.add_argument("config", help="run config (YAML)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("backends", help="list backends: available, or why not")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("analyze", help="re-derive ceilings from raw data without rerunning")
    p.add_argument("raw", metavar="RUN_DIR_OR_RAW",
                   help="a run directory or its raw.jsonl, or an ERT results run (FLOPS.NNN/MPI.NNNN/OpenMP.NNNN/max)")
    p.add_argument("--cache", metavar="LEVEL:SIZE[:SHARED_BY]", action="append", default=[],
                   help="a cache of the machine the data came from, e.g. 1:32K 2:256K 3:8M:4 (instance size, "
                        "cpus sharing one); replaces the caches the data records (an ERT run records none)")
    p.add_argument("-o", "--output", metavar="FILE", help="also write the ceiling JSON here")
    p.add_argument("--save-raw", metavar="FILE", help="also write the raw records analysed as a raw.jsonl "
                                                      "(an ERT results run converted, say); refused if FILE exists")
    p.add_argument("--json", action="store_true", help="print the ceiling JSON instead of the table")
    p.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("show", help="print a ceiling JSON as a table")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", help="a ceilings.json (or the run directory holding it)")
    p.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    p.set_defaults(func=cmd_show)

    _add_consumer_parsers(sub)
    return parser


def _guarded(func, args, prog: str) -> int:
    try:
        return func(args)
    except QuietExit as exc:
        return exc.code
    except ErtError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ert show x | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # an unwritable directory, a full disk: the user's to fix, in one line
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except UnicodeEncodeError as exc:  # a path this locale's file system encoding cannot hold (LANG=C)
        if not_a_file_name(exc) is None:
            raise
        print(f"{prog}: error: {not_a_file_name(exc)}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    any_locale_streams()  # a path the locale cannot encode (LANG=C, résultats) is printed, never a traceback
    interrupts_reach_main()
    args = build_parser().parse_args(argv)
    return _guarded(args.func, args, "ert")


def run_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ert-run",
        description="Sweep working sets, FLOPs per element, precisions and FMA on one backend, stream every "
                    "point to RUN_DIR/raw.jsonl, and write RUN_DIR/ceilings.json. Works the same under mpirun.")
    any_locale_streams()
    interrupts_reach_main()
    _add_run_arguments(parser)
    return _guarded(cmd_run, parser.parse_args(argv), "ert-run")


if __name__ == "__main__":
    sys.exit(main())
