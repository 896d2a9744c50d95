"""Do real ERT configs still convert?  `ert import-ert-config` then `ert validate` on every config given.

    .venv/bin/python benchmarks/ert_configs.py                       # ../shared/interop/ert-configs
    .venv/bin/python benchmarks/ert_configs.py DIR_OR_FILE [...]

Each config (a file, or every file below a folder but its README.md and
SOURCES.md) is converted and the result validated, as a user moving from ERT
would: `ert import-ert-config CONFIG -o CONFIG.yaml && ert validate
CONFIG.yaml`, in this process.  One line per config: converted and valid
(its threads and thread counts, and the points `ert validate` plans per
thread count), or refused in one line (ERT's HIP and SYCL configs target GPUs
ert drives through CUDA or OpenCL only).  The last line counts both; the exit
status is 1 when a config fails otherwise (a traceback, more than one error
line, a converted config that does not validate).  The real configs (45 of
them, issue 41) are not shipped with ert: the tests run this on
tests/data's own ERT configs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO.parent / "shared" / "interop" / "ert-configs"
NOT_CONFIGS = {"README.md", "SOURCES.md"}


def configs(paths: list[Path]) -> list[Path]:
    """The config files named, and every file below the folders named, in order."""
    out = []
    for path in paths:
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file() and p.name not in NOT_CONFIGS)
        elif path.is_file():
            out.append(path)
        else:
            sys.exit(f"ert_configs: error: {path}: no such file or folder")
    return out


def _ert(*argv: str) -> tuple[int, str, str]:
    """``ert ARGV`` in this process: (exit status, stdout, stderr)."""
    from ert.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception:  # noqa: BLE001 - a traceback is this script's finding, not its end
            traceback.print_exc()
            code = -1
    return code, out.getvalue(), err.getvalue()


def check(path: Path, folder: Path) -> tuple[str, str]:
    """("valid" | "refused" | "FAILED", what happened) of one config."""
    import yaml

    converted = folder / (path.name + ".yaml")
    code, _, err = _ert("import-ert-config", str(path), "-o", str(converted))
    errors = [line for line in err.splitlines() if ": error: " in line]
    if code == 2 and len(errors) == 1 and "Traceback" not in err:
        return "refused", errors[0].split(": error: ", 1)[1]
    if code != 0:
        return "FAILED", f"import-ert-config exited {code}: {err.strip()[-300:]}"
    code, out, err = _ert("validate", str(converted))
    if code != 0:
        return "FAILED", f"validate exited {code}: {err.strip()[-300:]}"
    cfg = yaml.safe_load(converted.read_text())
    counts = cfg.get("thread_counts") or [cfg.get("threads", "-")]
    planned = out.split(": valid: ", 1)[-1].split(" per rank layout")[0]
    return "valid", f"{cfg['backend']}, threads {','.join(map(str, counts))}: {planned}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", type=Path, default=[DEFAULT],
                   help=f"ERT configs or folders of them (default: {DEFAULT})")
    args = p.parse_args()
    found = configs(args.paths)
    tally = {"valid": 0, "refused": 0, "FAILED": 0}
    with tempfile.TemporaryDirectory(prefix="ert-configs-") as tmp:
        for path in found:
            verdict, detail = check(path, Path(tmp))
            tally[verdict] += 1
            print(f"{verdict:8s} {path.name}: {detail}", flush=True)
    print(f"{len(found)} config(s): {tally['valid']} converted and valid, {tally['refused']} refused in one line, "
          f"{tally['FAILED']} failed")
    return 1 if tally["FAILED"] or not found else 0


if __name__ == "__main__":
    sys.exit(main())
