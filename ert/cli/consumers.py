"""`ert plot | profile | compare | export | import-ert-config`: the commands that use ceiling JSON files.

Each command imports its module (and matplotlib) only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ert.errors import ErtError, fs_text
from ert.records.files import CEILINGS_NAME


# ---------------------------------------------------------------------------- consumers of the ceilings
def _ceilings_path(text: str) -> Path:
    path = Path(text)
    if path.is_dir() and not (path / CEILINGS_NAME).exists() and (path / "roofline.json").exists():
        return path / "roofline.json"  # an ERT results run directory
    return path / CEILINGS_NAME if path.is_dir() else path


def _write_or_print(text: str, output) -> None:
    """To stdout, or atomically to ``output``: never a half-written file."""
    if output:
        from ert.records.files import write_text_atomic

        write_text_atomic(text, output)
    else:
        sys.stdout.write(text)


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1 (or 0% to 100%): {text!r}")
    return value


def cmd_plot(args) -> int:
    from ert.consumers.plots import plot

    plot.check_output(args.output)
    if args.sweep:
        if args.app:
            raise ErtError("--app draws kernels on the roofline; it does not apply to --sweep", key="--app")
        from ert.interop.ert_results import load_any_ceilings
        from ert.records.rawio import read_raw

        run_dir = Path(args.ceilings)
        if not run_dir.is_dir():
            raise ErtError("--sweep needs a run directory (holding raw.jsonl)", path=run_dir)
        raw = read_raw(run_dir)
        if (run_dir / CEILINGS_NAME).exists():
            doc = load_any_ceilings(run_dir / CEILINGS_NAME)
        else:  # a run cut before its ceilings were written: build them from its records
            from ert.analysis.ceilings import build

            doc = build(raw)
        from ert.consumers.plots.plot_sweep import plot_sweep

        plot_sweep(raw, doc, args.output)
    else:
        from ert.consumers.profile.appdata import load_app
        from ert.interop.ert_results import load_any_ceilings

        doc = load_any_ceilings(_ceilings_path(args.ceilings))
        kernels = [k for path in args.app or [] for k in load_app(path)]
        plot.plot_roofline(doc, args.output, kernels=kernels, precision=args.precision, access=args.access)
    print(f"plot: {args.output}", file=sys.stderr)
    return 0


def cmd_profile(args) -> int:
    import json

    from ert.consumers.profile import profile
    from ert.consumers.profile.appdata import load_app
    from ert.interop.ert_results import load_any_ceilings

    doc = load_any_ceilings(_ceilings_path(args.ceilings))
    kernels = load_app(*args.app)
    profiles = profile.profile_all(kernels, doc, access=args.access, fma_ratio=args.fma_ratio)
    if args.json:
        print(json.dumps(profile.to_json(profiles, doc), indent=2))
    else:
        print(profile.format_profiles(profiles, doc))
    return 0


def cmd_compare(args) -> int:
    import json

    from ert.consumers.compare import compare
    from ert.interop.ert_results import load_any_ceilings

    if args.hosts:
        return _compare_hosts(args)
    if len(args.ceilings) < 2:
        raise ErtError("give at least two ceiling files to compare", key="CEILINGS_JSON")
    paths = [_ceilings_path(p) for p in args.ceilings]
    docs = [load_any_ceilings(p) for p in paths]
    labels = args.labels.split(",") if args.labels else compare.default_labels(docs, [str(p) for p in paths])
    if len(labels) != len(docs):
        raise ErtError(f"{len(labels)} label(s) for {len(docs)} files", key="--labels")
    if args.plot:
        from ert.consumers.plots.plot import check_output

        check_output(args.plot)
    if args.json:
        print(json.dumps(compare.to_json(docs, labels), indent=2))
    else:
        print(compare.format_comparison(docs, labels))
    if args.plot:
        from ert.consumers.plots import compare_chart

        compare_chart.plot_comparison(docs, labels, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0


def _compare_hosts(args) -> int:
    """`ert compare RUN --hosts`: one run's hosts side by side (its ceilings.json `hosts` section)."""
    import json

    from ert.interop.ert_results import load_any_ceilings
    from ert.consumers.compare import compare
    from ert.consumers.terminal import hosts_table

    if len(args.ceilings) != 1:
        raise ErtError(f"--hosts compares the hosts of one run: give one ceilings.json or run directory, "
                       f"not {len(args.ceilings)}", key="--hosts")
    path = _ceilings_path(args.ceilings[0])
    doc = load_any_ceilings(path)
    if not doc.get("hosts"):
        raise ErtError("no per-host ceilings: the run was on one host, or written before schema 1.10 "
                       "(`ert analyze RUN_DIR -o FILE` re-derives them from a raw.jsonl with host_seconds)",
                       path=path, key="hosts")
    if args.labels:
        raise ErtError("--labels names machines; with --hosts the columns are the run's host names", key="--labels")
    if args.plot:
        from ert.consumers.plots.plot import check_output

        check_output(args.plot)
    if args.json:
        print(json.dumps(hosts_table.hosts_json(doc), indent=2))
    else:
        print(hosts_table.format_hosts_comparison(doc))
    if args.plot:
        from ert.consumers.plots import compare_chart

        compare_chart.plot_comparison(*hosts_table.host_docs(doc), args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0


def _report_machine(text: str):
    """One input of `ert report`: a run directory (its ceilings and raw records), a ceilings.json or ERT's
    roofline.json (ceilings only)."""
    from ert.interop.ert_results import load_any_ceilings
    from ert.consumers.html.page import Machine
    from ert.records.rawio import RAW_NAME, read_raw

    path = Path(text)
    if not path.exists():
        raise ErtError("no such file or directory", path=path)
    raw = read_raw(path) if path.is_dir() and (path / RAW_NAME).exists() else None
    ceilings = _ceilings_path(text)
    if path.is_dir() and not ceilings.exists():
        if raw is None:
            raise ErtError(f"holds neither {CEILINGS_NAME}, raw.jsonl nor ERT's roofline.json", path=path)
        from ert.analysis.ceilings import build  # a run cut before its ceilings were written

        return Machine(doc=build(raw), source=str(path), raw=raw)
    return Machine(doc=load_any_ceilings(ceilings), source=str(path), raw=raw)


def write_report(inputs: list[str], output, labels: list[str] | None = None) -> int:
    """The HTML report of ``inputs`` (one run, or several machines compared), written atomically; its size in bytes."""
    from ert.consumers.html import page as html_report
    from ert.records.files import write_text_atomic

    machines = [_report_machine(text) for text in inputs]
    if labels is not None and len(labels) != len(machines):
        raise ErtError(f"{len(labels)} label(s) for {len(machines)} inputs", key="--labels")
    page = fs_text(html_report.render(machines, labels))
    write_text_atomic(page, output)
    return len(page.encode("utf-8"))


def cmd_report(args) -> int:
    if Path(args.output).suffix.lower() not in (".html", ".htm"):
        raise ErtError("the report is an HTML page: name it .html", path=args.output, key="-o")
    size = write_report(args.inputs, args.output, args.labels.split(",") if args.labels else None)
    print(f"report: {args.output} ({size / 1024:.0f} KiB)", file=sys.stderr)
    return 0


def _export_tool(args, doc: dict) -> int:
    """ncu-section, rocprof-compute, kerncraft, carm: files another roofline tool loads (kerncraft: its own module)."""
    from ert.records.files import write_text_atomic
    from ert.consumers.export import export_tools
    from ert.errors import read_user_text

    fmt = args.format
    out = Path(args.output) if args.output else None
    if fmt == "ncu-section":
        if out is None or out.suffix:
            raise ErtError("ncu-section writes a section folder: give -o DIR (then ncu --section-folder DIR)",
                           key="--output")
        files = export_tools.to_ncu_sections(doc, label=args.label, access=args.access)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            write_text_atomic(text, out / name)
        idents = ", ".join(name[:-len(".section")] + "_roofline" for name in files)
        print(f"export: {len(files)} section file(s) in {out}; profile with: ncu --section-folder {out} "
              f"--section <id> ... (ids: {idents})", file=sys.stderr)
        return 0
    if fmt == "carm":
        if out is None:
            raise ErtError("carm writes into a CARM results folder: give -o RESULTS_DIR "
                           "(then carm gui --results-dir RESULTS_DIR)", key="--output")
        path = out / export_tools.machine_id(doc, args.label) / "benchmarks.jsonl"
        existing = path.read_text(encoding="utf-8") if path.exists() else None
        text = export_tools.to_carm(doc, label=args.label, existing=existing)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(text, path)
        print(f"export: {path}; view with: carm gui --results-dir {out}", file=sys.stderr)
        return 0
    if fmt == "rocprof-compute":
        merge = read_user_text(Path(args.merge), expected="a rocprof-compute roofline.csv") if args.merge else None
        text = export_tools.to_rocprof_csv(doc, access=args.access, merge=merge, merge_source=str(args.merge))
        if out is not None and out.is_dir():
            out = out / "roofline.csv"
        _write_or_print(text, out)
        return 0
    from ert.consumers.export.kerncraft import to_kerncraft

    _write_or_print(to_kerncraft(doc), out)
    return 0


def cmd_export(args) -> int:
    from ert.consumers.export import export
    from ert.consumers.export import export_tools
    from ert.interop.ert_results import load_any_ceilings

    source = _ceilings_path(args.ceilings)
    doc = load_any_ceilings(source)
    _warn_disturbed(doc, source, args.format)
    kernels = None
    if args.format != "nersc" and (args.layout != "flat" or args.level):
        raise ErtError("--layout and --level apply to the nersc format only", key="--layout" if args.layout != "flat" else "--level")
    if args.merge and args.format != "rocprof-compute":
        raise ErtError("--merge applies to the rocprof-compute format only", key="--merge")
    if args.label and args.format not in ("ncu-section", "carm"):
        raise ErtError("--label names the machine in the ncu-section and carm formats only", key="--label")
    if args.app:
        if args.format != "nersc":
            raise ErtError("--app adds application points to the nersc format only", key="--app")
        from ert.consumers.profile.appdata import load_app

        kernels = load_app(args.app)
    if args.format in export_tools.TOOL_FORMATS:
        try:
            return _export_tool(args, doc)
        except ErtError as exc:
            if exc.path is None and exc.key not in ("--output", "--merge", "--label"):
                exc.path = str(source)  # the ceilings file cannot become this format (a CPU run, a level it lacks)
            raise
    text = export.export_text(doc, fmt=args.format, precision=args.precision, access=args.access, kernels=kernels,
                              layout=args.layout, level=args.level)
    _write_or_print(text, args.output)
    return 0


def _warn_disturbed(doc: dict, source, fmt: str) -> None:
    """One line on stderr when the file holds ceilings measured while the host was disturbed: the tools these
    formats feed have no field to mark them, so their roofs would read as the machine's."""
    from ert.consumers.report_sections import flagged_names

    flagged = flagged_names(doc.get("ceilings") or {})
    if flagged and fmt != "csv":  # the csv has a disturbed column
        shown = ", ".join(flagged[:4]) + (f" and {len(flagged) - 4} more" if len(flagged) > 4 else "")
        print(f"ert export: warning: {fs_text(str(source))}: {len(flagged)} ceiling(s) measured while the host was "
              f"disturbed ({shown}) are exported as measured: the {fmt} format has no field to mark them; "
              f"measure again on a quiet host", file=sys.stderr)


def cmd_import_ert_config(args) -> int:
    from ert.interop import import_ert

    from ert.errors import read_user_text

    path = Path(args.file)
    text = read_user_text(path, expected="an ERT config file")
    conv = import_ert.convert(text, path=path)
    yaml_text = import_ert.to_yaml(conv, source=path)
    for note in conv.notes:
        print(f"import-ert-config: {path.name}: {note}", file=sys.stderr)
    _write_or_print(yaml_text, args.output)
    return 0


def _add_consumer_parsers(sub) -> None:
    roof_rule = ("memory roofs use the bandwidth of one kernel per level: --precision (default fp64) and --access "
                 "(default rw = ERT's read+write), falling back to another precision, then the other access")
    p = sub.add_parser("plot", help="draw the roofline (or, with --sweep, the sweep behind it)",
                       description="Log-log roofline of a ceilings file: " + roof_rule + ".")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", help="a ceilings.json or its run directory (RUN_DIR with --sweep)")
    p.add_argument("--app", metavar="FILE", action="append",
                   help="application kernels (ncu CSV, YAML or JSON); repeatable")
    p.add_argument("-o", "--output", metavar="OUT", required=True, help="image file: .png, .svg or .pdf")
    p.add_argument("--sweep", action="store_true",
                   help="plot RUN_DIR's sweep: GB/s vs working set with plateaus, GFLOP/s vs FLOPs per element")
    p.add_argument("--precision", choices=("fp64", "fp32", "fp16"), default="fp64", help="precision of the memory roofs")
    p.add_argument("--access", choices=("rw", "ro"), default="rw", help="access pattern of the memory roofs")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("profile", help="place application kernels on the roofline: AI, binding ceiling, %% of attainable",
                       description="Hierarchical roofline of each kernel. Memory roofs: the bandwidth per level of the "
                                   "kernel's own precision with --access (default rw = ERT's read+write), falling "
                                   "back to another precision, then the other access.")
    p.add_argument("app", metavar="APP_FILE", nargs="+",
                   help="Nsight Compute CSV (--csv or --csv --page raw), or YAML/JSON; several ncu files (NERSC's "
                        "memory+time pass and FLOP pass) are merged by kernel and launch ID")
    p.add_argument("--ceilings", metavar="CEILINGS_JSON", required=True, help="a ceilings.json or its run directory")
    p.add_argument("--fma-ratio", metavar="F", type=_fraction,
                   help="FMA share of FP instructions (0-1 or %%): compute ceiling (2F + 1 - F)/2 x FMA peak; "
                        "default: derived from the dfma/dadd/dmul counts of an ncu file")
    p.add_argument("--access", choices=("rw", "ro"), default="rw", help="access pattern of the memory roofs")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("compare", help="ceilings of several machines side by side, with ratios")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", nargs="+", help="two or more ceilings.json (or run directories)")
    p.add_argument("--labels", metavar="A,B,...", help="names of the machines (default: host names)")
    p.add_argument("--plot", metavar="OUT", help="also draw the ratios (.png, .svg or .pdf)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--hosts", action="store_true",
                   help="one run on 2+ hosts: its hosts side by side, each ceiling against the median of the hosts")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="one self-contained HTML page: a run's roofline, sweep and tables, or "
                                      "several machines compared",
                       description="Write one HTML file (no server, nothing loaded from the network): header, "
                                   "roofline, sweep (for a run directory), the tables of `ert show`; hover for "
                                   "values, click the legend to show or hide. Several inputs: the procurement view "
                                   "(every machine's roofs on one chart, the ratios of `ert compare`).")
    p.add_argument("inputs", metavar="INPUT", nargs="+",
                   help="a run directory, a ceilings.json or ERT's roofline.json (several: compared, ratios to the first)")
    p.add_argument("-o", "--output", metavar="REPORT.html", required=True, help="the HTML file to write")
    p.add_argument("--labels", metavar="A,B,...", help="names of the machines (default: host names)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="write the ceilings for other tools: ERT, NERSC, CSV, Nsight Compute, "
                                      "rocprof-compute, kerncraft, CARM",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Write a ceilings file for another roofline tool. For ert and nersc, " + roof_rule + ".",
                       epilog="""formats, and how to load the result:
  ert              ERT 1.1 roofline.json (ERT's own plotting scripts)
  nersc            data file of NERSC's plot_roofline.py (python plot_roofline.py FILE)
  csv              one row per ceiling
  ncu-section      -o DIR: one Nsight Compute section per precision, measured roofs as constants and
                   ncu's own counters as the achieved point. Profile with
                     ncu --section-folder DIR --section ert_<label>_fp64_roofline ./app
                   and open the report in the GUI (or: ncu --list-sections --section-folder DIR)
  rocprof-compute  roofline.csv of an AMD GPU run (refused for a CPU run); -o WORKLOAD_DIR puts it
                   where rocprof-compute looks, and --roof-only then skips its own benchmark:
                     rocprof-compute profile -n NAME --roof-only -- ./app
                   --merge FILE keeps FILE's columns ert does not measure (LDS, MFMA); without it
                   they are nan
  kerncraft        machine file of a CPU run (load = ert read-only, update = ert read+write):
                     kerncraft -p RooflineFLOP -m FILE kernel.c -D N 1000000 -c CORES
  carm             -o RESULTS_DIR: RESULTS_DIR/<label>/benchmarks.jsonl (ert's no-FMA roof as
                   operation ert_no_fma):  carm gui --results-dir RESULTS_DIR
""")
    p.add_argument("ceilings", metavar="CEILINGS_JSON", help="a ceilings.json or its run directory")
    p.add_argument("--format", choices=("ert", "nersc", "csv", "ncu-section", "rocprof-compute", "kerncraft", "carm"),
                   required=True)
    p.add_argument("-o", "--output", metavar="PATH", help="write here (atomically) instead of stdout; a folder "
                                                          "for ncu-section and carm")
    p.add_argument("--precision", choices=("fp64", "fp32", "fp16"), default="fp64", help="precision of the memory roofs")
    p.add_argument("--access", choices=("rw", "ro"), default="rw", help="access pattern of the memory roofs")
    p.add_argument("--app", metavar="FILE", help="nersc only: add the kernels of this file (YAML/JSON or ncu CSV)")
    p.add_argument("--layout", choices=("flat", "hierarchical"), default="flat",
                   help="nersc only: flat (AI and FLOPS per kernel, plot_roofline.py) or hierarchical "
                        "(AI_<level> lines, plot_roofline_hierarchical.py); default flat")
    p.add_argument("--level", metavar="NAME", help="nersc only: write this one memory level (e.g. DRAM, HBM); "
                                                     "flat AI is at it (default: the last level)")
    p.add_argument("--label", metavar="NAME", help="ncu-section and carm: the machine's name in section "
                                                     "identifiers and CARM records (default: host and backend)")
    p.add_argument("--merge", metavar="FILE", help="rocprof-compute only: an existing roofline.csv whose LDS and "
                                                     "MFMA columns (and other devices) are kept")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("import-ert-config", help="convert an ERT 1.1 config into an ert YAML config")
    p.add_argument("file", metavar="FILE", help="an ERT config (KEY value... lines)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) instead of stdout")
    p.set_defaults(func=cmd_import_ert_config)
