#!/usr/bin/env bash
# The GPU acceptance run: what a first, short allocation on an NVIDIA GPU should run, in one command of
# at most 480 s, the tensor roofs first, bringing back what it did after every step. NEVER RUN ON A GPU YET.
#
#   bash benchmarks/gpu_acceptance.sh [--dry-run] [--bring DIR] OUT_DIR
#
# Steps, in this order, each under its cap; the caps sum to the 420 s budget (issue 34). A failed step
# does not stop the next:
#   env            45 s  the carried wheels (${ERT_WHEELS:-.whl}, from benchmarks/gpu_wheels.sh) installed one
#                        by one into a folder on PYTHONPATH, the project (pip -e; where that fails, the
#                        checkout on PYTHONPATH with kernels/ and configs/ linked into ert/), python, `ert backends`, nvcc/ncu/cuobjdump, nvidia-smi section by section
#                        (and the PCIe link, current and maximum), cupy.show_config(), the backend's describe()
#   tensor-first   70 s  `ert run configs/gpu-tensor-first.yaml` (tensor points only, 28 on an H100), `ert show`
#   tensor-tests   30 s  pytest -m gpu: the tensor kernels' replay and rated-peak tests
#   tiny-gpu       80 s  `ert run configs/tiny-gpu.yaml`, `ert show`
#   links-network  35 s  `ert run configs/links-network.yaml`, `ert show`
#   integer-gpu    45 s  `ert run configs/integer-gpu.yaml`, `ert show`
#   ncu            65 s  Nsight Compute captures of ert's kernels, wgmma included (benchmarks/gpu_ncu_driver.py),
#                        in both CSV layouts, read by `ert profile`
#   gpu-tests      50 s  pytest -m gpu: the rest (not the sweeps that already ran as runs above)
# Left out: the nvcc tests (no GPU needed: CI runs them) and the plots (make them afterwards from the tarball:
# `ert plot OUT/runs/NAME`).
#
# After every step (and so after a cut, up to the last step finished) OUT_DIR/summary.txt says each step's
# status, exit and seconds and measured/rated per ceiling of every run so far, and OUT_DIR/acceptance.tar.gz
# holds all of OUT_DIR; --bring DIR copies those two into DIR (on the device tool: --bring "$OUT", where only
# 8 files come back). A step is "ok" only if something ran: one whose tests all skipped, or that measured
# nothing, is "skipped: WHY".
#
# Exit status: 0 when no step failed, 1 when any failed or was cut, 2 when it could not start (no NVIDIA GPU,
# bad arguments). Settings (environment):
#   PYTHON                python with cupy (default python3; the device image's holds cupy-cuda13x)
#   ERT_WHEELS            folder of wheels to install first (default .whl; skipped if it has none)
#   ERT_SITE              where those wheels go (default /tmp/ert-site; put first on PYTHONPATH)
#   ERT_ACCEPT_BUDGET_S   seconds for all steps together (default 420)
#   ERT_ACCEPT_LIMIT_S    seconds for the whole command, checkpoints included (default 480)
#   ERT_ACCEPT_CAPS       per-step caps in seconds, e.g. "tiny-gpu=60,gpu-tests=70"
#   ERT_ACCEPT_STEPS      only these steps, e.g. "env,tensor-first"
#   ERT_ACCEPT_DRY=1      the same as --dry-run: print every step's commands, run nothing, write nothing
#   ERT_ACCEPT_STUB       a command run as `STUB STEP OUT_DIR` in place of each step's own commands (the
#                         tests cut the run at every step boundary without real sweeps)
set -uo pipefail

usage() {
    sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
    echo "options: --dry-run (print the steps only), --bring DIR (copy summary.txt and the tarball there after every step)"
}

DRY=${ERT_ACCEPT_DRY:-0}
BRING=""
OUT_DIR=""
while (($#)); do
    case $1 in
        --dry-run) DRY=1 ;;
        --bring) BRING=${2:-}; shift
                 [[ -n $BRING ]] || { echo "gpu_acceptance.sh: --bring needs a folder" >&2; exit 2; } ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "gpu_acceptance.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
        *) [[ -z $OUT_DIR ]] || { echo "gpu_acceptance.sh: one OUT_DIR only (got $OUT_DIR and $1)" >&2; exit 2; }
           OUT_DIR=$1 ;;
    esac
    shift
done
[[ $DRY == 0 ]] || DRY=1
[[ -n $OUT_DIR ]] || { echo "gpu_acceptance.sh: missing OUT_DIR" >&2; usage >&2; exit 2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2
case $OUT_DIR in /*) ;; *) OUT_DIR=$PWD/$OUT_DIR ;; esac
case $BRING in ''|/*) ;; *) BRING=$PWD/$BRING ;; esac

BUDGET=${ERT_ACCEPT_BUDGET_S:-420}
LIMIT=${ERT_ACCEPT_LIMIT_S:-480}
for pair in "ERT_ACCEPT_BUDGET_S=$BUDGET" "ERT_ACCEPT_LIMIT_S=$LIMIT"; do
    [[ ${pair#*=} =~ ^[0-9]+$ ]] || { echo "gpu_acceptance.sh: ${pair%%=*}: '${pair#*=}' is not a number of seconds" >&2; exit 2; }
done
((LIMIT >= BUDGET)) || { echo "gpu_acceptance.sh: ERT_ACCEPT_LIMIT_S ($LIMIT) is below ERT_ACCEPT_BUDGET_S ($BUDGET)" >&2; exit 2; }
WHEELS=${ERT_WHEELS:-.whl}
SITE=${ERT_SITE:-/tmp/ert-site}
SRC_TREE=${ERT_SRC_TREE:-/tmp/ert-src}  # console scripts of the PYTHONPATH install, where pip -e fails
STUB=${ERT_ACCEPT_STUB:-}
STEPS=(env tensor-first tensor-tests tiny-gpu links-network integer-gpu ncu gpu-tests)
declare -A CAP=([env]=45 [tensor-first]=70 [tensor-tests]=30 [tiny-gpu]=80 [links-network]=35 [integer-gpu]=45
                [ncu]=65 [gpu-tests]=50)
# The runs, by step, and the config each runs.
declare -A RUN_CONFIG=([tensor-first]=gpu-tensor-first [tiny-gpu]=tiny-gpu [links-network]=links-network
                       [integer-gpu]=integer-gpu)
# The tensor tests run first; the rest of `pytest -m gpu` leaves them out, and the sweeps that ran as runs.
TENSOR_TESTS="tests/test_cuda_tensor.py"
TENSOR_K="replayed_values or rated_tensor_peak"
GPU_TESTS_K="not (replayed_values or rated_tensor_peak or full_sweep_gives_sane_ceilings or gpu_ert_run_gives_checked_tensor_roofs)"
# The metrics `ert profile` reads (ert/interop/ncu_csv.py): time, bytes at L1, L2 and DRAM, FLOPs per
# precision. The optional ones (tensor pipes, integer instructions) are captured apart, only those this
# ncu lists for the GPU, so a name it does not know cannot spoil the main capture.
NCU_METRICS=gpu__time_duration.sum,l1tex__t_bytes.sum,lts__t_bytes.sum,dram__bytes.sum
for p in d f h; do for op in add mul fma; do
    NCU_METRICS+=",sm__sass_thread_inst_executed_op_${p}${op}_pred_on.sum"
done; done
NCU_EXTRA=(sm__inst_executed_pipe_tensor.sum sm__inst_executed_pipe_tensor_op_hmma.sum
           sm__inst_executed_pipe_tensor_op_dmma.sum sm__inst_executed_pipe_tensor_subpipe_hmma.sum
           sm__inst_executed_pipe_tensor_subpipe_dmma.sum sm__sass_thread_inst_executed_op_integer_pred_on.sum)
NCU_KERNELS='regex:^ert_(rw|ro|mma|wgmma)'

if [[ -n ${ERT_ACCEPT_CAPS:-} ]]; then
    IFS=, read -r -a pairs <<<"$ERT_ACCEPT_CAPS"
    for pair in "${pairs[@]}"; do
        name=${pair%%=*} value=${pair#*=}
        if [[ -z ${CAP[$name]+x} || ! $value =~ ^[0-9]+$ ]]; then
            echo "gpu_acceptance.sh: ERT_ACCEPT_CAPS: '$pair' is not STEP=SECONDS with a step of: ${STEPS[*]}" >&2
            exit 2
        fi
        CAP[$name]=$value
    done
fi
declare -A WANT=()
if [[ -n ${ERT_ACCEPT_STEPS:-} ]]; then
    IFS=, read -r -a wanted <<<"$ERT_ACCEPT_STEPS"
    for name in "${wanted[@]}"; do
        if [[ -z ${CAP[$name]+x} ]]; then
            echo "gpu_acceptance.sh: ERT_ACCEPT_STEPS: unknown step '$name' (steps: ${STEPS[*]})" >&2
            exit 2
        fi
        WANT[$name]=1
    done
fi
selected() { ((${#WANT[@]} == 0)) || [[ -n ${WANT[$1]+x} ]]; }

# ---------------------------------------------------------------------------- before anything: a GPU?
if ((!DRY)); then
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "gpu_acceptance.sh: no NVIDIA GPU: nvidia-smi not found on PATH (run it on a GPU machine;" \
             "--dry-run prints what it would do)" >&2
        exit 2
    fi
    if ! gpus=$(nvidia-smi -L 2>&1) || [[ $gpus != *GPU* ]]; then
        echo "gpu_acceptance.sh: no NVIDIA GPU: nvidia-smi -L failed: $(head -n 1 <<<"$gpus")" >&2
        exit 2
    fi
    if [[ -e $OUT_DIR && -n $(ls -A "$OUT_DIR" 2>/dev/null) ]]; then
        echo "gpu_acceptance.sh: $OUT_DIR is not empty: give a new folder" >&2
        exit 2
    fi
fi
PY=$(command -v "${PYTHON:-python3}") || { echo "gpu_acceptance.sh: no ${PYTHON:-python3} on PATH" >&2; exit 2; }
ERT=("$PY" -m ert)
shopt -s nullglob
WHEEL_FILES=("$WHEELS"/*.whl)
shopt -u nullglob
if ((${#WHEEL_FILES[@]})); then
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
PYTEST_EXTRA=(-p no:cacheprovider -rfEs)
# pytest-timeout (in the device image): one hung test fails alone instead of using up the step.
"$PY" -c "import pytest_timeout" >/dev/null 2>&1 && PYTEST_EXTRA+=(--timeout=60)

# ---------------------------------------------------------------------------- running commands
# quote ARGS...: the command as a shell (and Python's shlex) reads it back: plain words bare, others in '...'.
quote() {
    local out="" a q="'"
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+=" $a"; else out+=" '${a//$q/$q\\$q$q}'"; fi
    done
    echo "${out# }"
}

# x CMD...: one command of the current step, under the step's deadline; its failure is the step's.
# xo CMD...: the same, but informational: a failure is logged (and listed in the summary) only.
# x_to FILE CMD... / xo_to FILE CMD...: with stdout written to FILE.
_exec() {
    local required=$1 to=$2; shift 2
    if ((DRY)); then
        echo "+ $(quote "$@")${to:+ > $to}"
        return 0
    fi
    local left=$((STEP_DEADLINE - $(date +%s)))
    if ((left < 3)); then
        echo "!! no time left in step $STEP for: $(quote "$@")"
        ((required)) && STEP_RC=124
        return 124
    fi
    echo "+ $(quote "$@")${to:+ > $to}   [$(date -u +%H:%M:%S), ${left}s left in $STEP]"
    # SIGINT first: pytest then still writes its report and junit XML, ert-run leaves a resumable run.
    local rc
    if [[ -n $to ]]; then
        timeout -s INT -k 10 "$left" "$@" >"$to"
    else
        timeout -s INT -k 10 "$left" "$@"
    fi
    rc=$?
    if ((rc)); then
        echo "!! exit $rc$( ((rc == 124 || rc == 137)) && echo ' (cut at the time cap)'): $(quote "$@")"
        if ((required)); then
            ((STEP_RC)) || STEP_RC=$rc
        else
            echo "$STEP: exit $rc: $(quote "$@")" >>"$OUT_DIR/logs/optional-failures.txt"
        fi
    fi
    return $rc
}
x() { _exec 1 "" "$@"; }
xo() { _exec 0 "" "$@"; }
x_to() { local f=$1; shift; _exec 1 "$f" "$@"; }
xo_to() { local f=$1; shift; _exec 0 "$f" "$@"; }
note() { echo "# $*"; }
# skip WHY: the step ran nothing that counts (it is then "skipped: WHY", not "ok").
skip() {
    note "skipped: $*"
    ((DRY)) || echo "$*" >"$OUT_DIR/logs/$STEP.skip"
}

# ---------------------------------------------------------------------------- the steps
# The cuda backend's describe() (device facts, rated peaks, clocks), or why it is not available, in one line.
DESCRIBE='import json, sys; from ert.backends import cuda; ok, why, detail = cuda.probe(); ok or sys.exit(f"the cuda backend is not available: {why}"); b = cuda.create(); print(json.dumps(b.describe(), indent=1, default=str)); b.close()'

step_env() {
    x nvidia-smi
    # Section by section: a section this driver or VM refuses loses nothing else.
    local section
    for section in CLOCK PCIE POWER MEMORY PERFORMANCE; do
        xo_to "$OUT_DIR/logs/nvidia-smi-$section.txt" nvidia-smi -q -d "$section"
    done
    # The PCIe link now and at its best (an idle GPU trains down; a VM may report a maximum the slot never gives).
    xo nvidia-smi --query-gpu=pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax --format=csv
    if ((${#WHEEL_FILES[@]})); then
        # One by one, pip choosing each package's wheel for this interpreter (gpu_wheels.sh fetched CPython
        # 3.10-3.13 builds): one bad wheel does not block the others. The imports below are what counts.
        local list=() line
        if [[ -f $WHEELS/packages.txt ]]; then
            while read -r line; do [[ -n $line && $line != \#* ]] && list+=("$line"); done <"$WHEELS/packages.txt"
        else
            list=("${WHEEL_FILES[@]}")
        fi
        for line in "${list[@]}"; do
            xo "$PY" -m pip install -q --no-index --find-links "$WHEELS" --no-deps --no-compile --no-cache-dir \
                --upgrade --target "$SITE" "$line"
        done
    else
        note "no wheels in $WHEELS: nothing carried to install (bash benchmarks/gpu_wheels.sh makes them)"
    fi
    # ert.kernels and ert.configs exist only in an installed tree (pyproject maps kernels/ and configs/).
    if ((!DRY)) && "$PY" -c "import ert, ert.kernels, ert.configs, sys; sys.exit(not ert.__file__.startswith('$REPO/'))" \
        >/dev/null 2>&1; then
        note "ert is already installed from this checkout"
    elif ! xo "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e .; then
        # The installed layout by hand: this checkout on PYTHONPATH (the steps run from it, so its ert/ is
        # the one imported in any case) with kernels/ and configs/ linked into ert/ as ert.kernels and
        # ert.configs (ignored by git), and the two console scripts (the tests run ert-run) first on PATH.
        note "pip install -e . failed: ert from this checkout on PYTHONPATH, kernels/ and configs/ linked into ert/"
        x ln -sfn ../kernels ert/kernels
        x ln -sfn ../configs ert/configs
        x mkdir -p "$SRC_TREE/bin"
        if ((!DRY)); then
            local name entry
            for name in ert ert-run; do
                entry=main; [[ $name == ert-run ]] && entry=run_main
                printf '#!%s\nimport sys\nfrom ert.cli import %s\nsys.exit(%s())\n' "$PY" "$entry" "$entry" \
                    >"$SRC_TREE/bin/$name"
                chmod +x "$SRC_TREE/bin/$name"
            done
            # Read by the main shell after this step: the later steps run with it.
            printf 'export PYTHONPATH=%q\nexport PATH=%q\n' "$REPO${PYTHONPATH:+:$PYTHONPATH}" \
                "$SRC_TREE/bin:$PATH" >"$OUT_DIR/logs/env.sh"
            export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
        fi
    fi
    x "$PY" -c "import sys, ert, ert.kernels, ert.configs, pydantic, jsonschema; print(sys.version.split()[0], 'ert', ert.__version__, ert.__file__)"
    xo "$PY" -c "import cupy; cupy.show_config()"
    x "${ERT[@]}" backends
    xo "$PY" -c "$DESCRIBE"
    xo nvcc --version
    xo ncu --version
    xo "$PY" -c "from ert.backends.cuda_tensor import sass_tools; print('cuobjdump, nvdisasm:', sass_tools())"
    xo_to "$OUT_DIR/logs/pip-freeze.txt" "$PY" -m pip freeze
}

step_run() {  # step_run STEP: the step's config, then `ert show`
    local name=${RUN_CONFIG[$1]} run="$OUT_DIR/runs/${RUN_CONFIG[$1]}"
    x "${ERT[@]}" run "configs/$name.yaml" --backend cuda --out "$run" -q
    ((DRY)) && { xo "${ERT[@]}" show "$run"; return 0; }
    if [[ -f $run/ceilings.json ]]; then
        xo "${ERT[@]}" show "$run"
    elif [[ ! -s $run/raw.jsonl ]]; then
        note "no raw.jsonl: the run measured nothing"
    fi
}

step_ncu() {
    if ! command -v ncu >/dev/null 2>&1; then
        if ((DRY)); then
            note "ncu is not on PATH here: on the GPU machine the step is skipped where it is missing"
        else
            skip "ncu not on PATH"
            return 0
        fi
    fi
    local dir="$OUT_DIR/ncu" rep="$OUT_DIR/ncu/ert-kernels" ceilings="$OUT_DIR/runs/tiny-gpu"
    x mkdir -p "$dir"
    x ncu --target-processes all --clock-control none --kernel-name "$NCU_KERNELS" --launch-count 40 \
        --metrics "$NCU_METRICS" -f -o "$rep" "$PY" benchmarks/gpu_ncu_driver.py
    x_to "$dir/ncu-long.csv" ncu --import "$rep.ncu-rep" --csv
    x_to "$dir/ncu-raw.csv" ncu --import "$rep.ncu-rep" --csv --page raw
    if ((!DRY)) && ! grep -q '"ert_' "$dir/ncu-long.csv" 2>/dev/null; then
        skip "ncu profiled no ert kernel (ncu-long.csv names none)"
        return 0
    fi
    # The optional metrics this ncu knows for this GPU, captured apart.
    xo_to "$dir/query-metrics.txt" ncu --query-metrics
    local extra=() m
    if ((DRY)); then
        extra=("${NCU_EXTRA[@]}")
        note "(only those of the following that ncu --query-metrics lists)"
    else
        for m in "${NCU_EXTRA[@]}"; do
            grep -q "^${m%.sum}[[:space:]]" "$dir/query-metrics.txt" 2>/dev/null && extra+=("$m")
        done
    fi
    if ((${#extra[@]})); then
        local list; list=$(IFS=,; echo "${extra[*]}")
        xo ncu --target-processes all --clock-control none --kernel-name "$NCU_KERNELS" --launch-count 40 \
            --metrics "$NCU_METRICS,$list" -f -o "$rep-extra" "$PY" benchmarks/gpu_ncu_driver.py
        xo_to "$dir/ncu-extra-long.csv" ncu --import "$rep-extra.ncu-rep" --csv
        xo_to "$dir/ncu-extra-raw.csv" ncu --import "$rep-extra.ncu-rep" --csv --page raw
    else
        note "ncu --query-metrics lists none of: ${NCU_EXTRA[*]}"
    fi
    # ert reads the real captures, placed on the ceilings measured on the same GPU (or, where that run left
    # none, on the hand-made GPU ceilings of tests/data).
    [[ $DRY == 1 || -f $ceilings/ceilings.json ]] || ceilings=tests/data/ceilings-handworked-gpu.json
    x "${ERT[@]}" profile "$dir/ncu-long.csv" --ceilings "$ceilings"
    x "${ERT[@]}" profile "$dir/ncu-raw.csv" --ceilings "$ceilings"
    if ((${#extra[@]})); then  # the tensor-pipe counts as FLOPs, the integer instructions
        xo "${ERT[@]}" profile "$dir/ncu-extra-long.csv" --ceilings "$ceilings"
    fi
}

step_pytest() {  # step_pytest -k EXPRESSION PATH...: pytest -m gpu; "skipped" where no test ran
    local xml="$OUT_DIR/$STEP.xml"
    x "$PY" -m pytest -q -m gpu "$1" "$2" "${PYTEST_EXTRA[@]}" --junitxml="$xml" --basetemp="$OUT_DIR/$STEP-tmp" \
        "${@:3}"
    ((DRY)) && return 0
    local counts; counts=$(junit "$xml")
    read -r tests failures errors skipped _ <<<"$counts"
    if [[ $counts == unreadable* ]]; then
        note "no junit XML: pytest was cut before it wrote one"
    elif ((tests == 0)); then
        skip "no test collected"
        STEP_RC=0  # pytest exits 5 when nothing is collected
    elif ((skipped == tests)); then
        skip "all $tests tests skipped ($(junit_skip_reason "$xml"))"
    fi
    echo "# junit: $tests tests, $failures failures, $errors errors, $skipped skipped"
}

junit() {  # "TESTS FAILURES ERRORS SKIPPED" of a junit XML, or "unreadable"
    "$PY" - "$1" <<'EOF' 2>/dev/null || echo "unreadable"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
print(" ".join(str(sum(int(s.get(k, 0)) for s in suites)) for k in ("tests", "failures", "errors", "skipped")))
EOF
}

junit_skip_reason() {  # the first skip message of a junit XML, on one line
    "$PY" - "$1" <<'EOF' 2>/dev/null || echo "reason unreadable"
import sys, xml.etree.ElementTree as ET
skip = next(ET.parse(sys.argv[1]).getroot().iter("skipped"), None)
print(" ".join((skip.get("message", "") if skip is not None else "").split())[:200] or "no reason given")
EOF
}

run_named_step() {
    if [[ -n $STUB ]]; then
        x "$STUB" "$1" "$OUT_DIR"
        return
    fi
    case $1 in
        env) step_env ;;
        tensor-first|tiny-gpu|links-network|integer-gpu) step_run "$1" ;;
        tensor-tests) step_pytest -k "$TENSOR_K" "$TENSOR_TESTS" ;;
        ncu) step_ncu ;;
        gpu-tests)  # only the files that mark tests gpu: collecting all of tests/ takes seconds for nothing
            local files; mapfile -t files < <(grep -l -E 'pytest\.mark\.gpu|needs_gpu' tests/test_*.py)
            step_pytest -k "$GPU_TESTS_K" "${files[@]}" ;;
    esac
}

planned_caps() {  # the sum of the selected steps' caps
    local sum=0 s
    for s in "${STEPS[@]}"; do selected "$s" && sum=$((sum + CAP[$s])); done
    echo $sum
}

# ---------------------------------------------------------------------------- dry run: print and stop
if ((DRY)); then
    echo "gpu_acceptance.sh --dry-run: OUT_DIR $OUT_DIR, python $PY, budget ${BUDGET}s, limit ${LIMIT}s," \
         "wheels: ${#WHEEL_FILES[@]} in $WHEELS"
    for STEP in "${STEPS[@]}"; do
        if ! selected "$STEP"; then
            echo "[step $STEP] not selected (ERT_ACCEPT_STEPS)"
            continue
        fi
        echo "[step $STEP] cap ${CAP[$STEP]}s"
        run_named_step "$STEP"
        echo "+ (checkpoint) summary.txt and acceptance.tar.gz in $OUT_DIR${BRING:+, copied to $BRING}"
    done
    sum=$(planned_caps)
    echo "planned caps: ${sum}s of the ${BUDGET}s budget$( ((sum > BUDGET)) && echo ': OVER, the last steps will be cut')"
    exit 0
fi

# ---------------------------------------------------------------------------- the real run
mkdir -p "$OUT_DIR/logs" "$OUT_DIR/runs" || exit 2
[[ -z $BRING ]] || mkdir -p "$BRING" || exit 2
START=$(date +%s)
END=$((START + BUDGET))
HARD_END=$((START + LIMIT))
declare -A RC=() SECS=() STATUS=()
for STEP in "${STEPS[@]}"; do selected "$STEP" && STATUS[$STEP]="not run yet" || STATUS[$STEP]="not selected"; done

gpu_facts=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv,noheader 2>&1 | head -n 1)
# Clocks, power and temperature every half second for the whole run.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
    --format=csv -lms 500 >"$OUT_DIR/nvidia-smi-log.csv" 2>&1 &
SMI_PID=$!
trap 'kill "$SMI_PID" 2>/dev/null' EXIT

# ceilings_of STEP: measured/rated of the step's run into runs/NAME.summary.txt (read by every summary after).
ceilings_of() {
    local name=${RUN_CONFIG[$1]} run="$OUT_DIR/runs/${RUN_CONFIG[$1]}" left=$((HARD_END - $(date +%s) - 10))
    ((left > 2)) || return 0
    # Interrupted at its cap, ert-run writes the ceilings of what it measured; killed, it leaves only raw.jsonl:
    # then the points measured are analysed apart (ceilings-partial.json, marked partial in the summary).
    if [[ ! -f $run/ceilings.json && -s $run/raw.jsonl ]]; then
        timeout -k 2 "$((left < 15 ? left : 15))" "${ERT[@]}" analyze "$run" -o "$run/ceilings-partial.json" \
            >"$OUT_DIR/logs/analyze-$name.log" 2>&1 || echo "!! exit $?: ert analyze $run (logs/analyze-$name.log)"
    fi
    left=$((HARD_END - $(date +%s) - 10))
    ((left > 2)) || return 0
    timeout -k 2 "$((left < 20 ? left : 20))" "$PY" benchmarks/gpu_summary.py "$run" --json "$OUT_DIR/runs/$name.summary.json" \
        >"$OUT_DIR/runs/$name.summary.txt" 2>&1
    echo "gpu_summary.py exit $?" >>"$OUT_DIR/runs/$name.summary.txt"
}

write_summary() {  # OUT_DIR/summary.txt as it stands after step $1
    local step status failed=0
    {
        echo "gpu_acceptance.sh summary: $(date -u +%FT%TZ), host $(uname -n), written after step $1"
        echo "GPU: $(head -n 1 <<<"$gpus"); $gpu_facts"
        echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); python $("$PY" -V 2>&1);" \
             "budget ${BUDGET}s, limit ${LIMIT}s, used $(($(date +%s) - START))s"
        echo
        printf '%-14s %5s %4s %4s  %s\n' step exit cap secs status
        for step in "${STEPS[@]}"; do
            status=${STATUS[$step]}
            [[ $status == FAILED* ]] && failed=1
            printf '%-14s %5s %4s %4s  %s\n' "$step" "${RC[$step]:--}" "${CAP[$step]}" "${SECS[$step]:--}" "$status"
        done
        if [[ -s $OUT_DIR/logs/optional-failures.txt ]]; then
            echo
            echo "informational commands that failed (not counted):"
            sed 's/^/  /' "$OUT_DIR/logs/optional-failures.txt"
        fi
        for step in "${STEPS[@]}"; do
            [[ -n ${RUN_CONFIG[$step]:-} && -f $OUT_DIR/runs/${RUN_CONFIG[$step]}.summary.txt ]] || continue
            echo
            echo "measured/rated per ceiling, $step (benchmarks/gpu_summary.py):"
            cat "$OUT_DIR/runs/${RUN_CONFIG[$step]}.summary.txt"
        done
        echo
        echo "every output: acceptance.tar.gz (logs/STEP.log, runs/NAME, ncu/, STEP.xml, nvidia-smi-log.csv);" \
             "plots afterwards: ert plot runs/NAME"
    } >"$OUT_DIR/summary.txt.new"
    mv -f "$OUT_DIR/summary.txt.new" "$OUT_DIR/summary.txt"
    return $failed
}

# checkpoint STEP: the summary so far and a tarball of OUT_DIR, each replaced whole (a kill leaves the last
# complete ones), copied to --bring's folder.
checkpoint() {
    local t0; t0=$(date +%s)
    # A run step's ceilings (a stubbed step that left no run folder has none to read).
    if [[ -n ${RUN_CONFIG[$1]:-} ]] && [[ -z $STUB || -d $OUT_DIR/runs/${RUN_CONFIG[$1]} ]]; then
        ceilings_of "$1"
    fi
    write_summary "$1"
    local base; base=$(basename "$OUT_DIR")
    local left=$((HARD_END - $(date +%s) - 3))
    ((left < 2)) && left=2
    timeout -k 2 "$left" tar -czf "$OUT_DIR/.acceptance.tar.gz.new" --exclude=acceptance.tar.gz \
        --exclude=.acceptance.tar.gz.new --exclude='*.ncu-rep' -C "$(dirname "$OUT_DIR")" "$base" 2>/dev/null
    local size; size=$(stat -c %s "$OUT_DIR/.acceptance.tar.gz.new" 2>/dev/null || echo 0)
    if ((size > 15 * 1024 * 1024)); then  # over what the device tool brings back: drop the pytest folders
        timeout -k 2 "$left" tar -czf "$OUT_DIR/.acceptance.tar.gz.new" --exclude=acceptance.tar.gz \
            --exclude=.acceptance.tar.gz.new --exclude='*.ncu-rep' --exclude='*-tmp' \
            -C "$(dirname "$OUT_DIR")" "$base" 2>/dev/null
    fi
    [[ -s $OUT_DIR/.acceptance.tar.gz.new ]] && mv -f "$OUT_DIR/.acceptance.tar.gz.new" "$OUT_DIR/acceptance.tar.gz"
    if [[ -n $BRING ]]; then
        local f
        for f in summary.txt acceptance.tar.gz; do
            [[ -f $OUT_DIR/$f ]] && cp -f "$OUT_DIR/$f" "$BRING/.$f.new" && mv -f "$BRING/.$f.new" "$BRING/$f"
        done
    fi
    echo "=== checkpoint after $1: summary.txt and acceptance.tar.gz in $OUT_DIR${BRING:+ and $BRING}" \
         "($(($(date +%s) - t0))s, $(($(date +%s) - START))s used)"
}

echo "gpu_acceptance.sh: $(date -u +%FT%TZ) on $(uname -n), $(head -n 1 <<<"$gpus"), budget ${BUDGET}s" \
     "(caps $(planned_caps)s), limit ${LIMIT}s, OUT_DIR $OUT_DIR"
failed=0 unsaid=0
for STEP in "${STEPS[@]}"; do
    selected "$STEP" || continue
    now=$(date +%s)
    STEP_DEADLINE=$((now + CAP[$STEP]))
    ((STEP_DEADLINE <= END)) || STEP_DEADLINE=$END
    if ((STEP_DEADLINE - now < 5)); then
        STATUS[$STEP]="FAILED: not run, the ${BUDGET}s budget was spent"
        RC[$STEP]=124
        failed=1 unsaid=1
        continue
    fi
    echo
    echo "=== [step $STEP] cap $((STEP_DEADLINE - now))s ($(date -u +%H:%M:%S))"
    rm -f "$OUT_DIR/logs/$STEP.skip"
    (
        STEP_RC=0
        run_named_step "$STEP"
        echo "$STEP_RC" >"$OUT_DIR/logs/$STEP.rc"
    ) 2>&1 | tee "$OUT_DIR/logs/$STEP.log"
    # shellcheck disable=SC1091  # written by step env where pip -e failed
    [[ -f $OUT_DIR/logs/env.sh ]] && source "$OUT_DIR/logs/env.sh"
    RC[$STEP]=$(cat "$OUT_DIR/logs/$STEP.rc" 2>/dev/null || echo 1)
    SECS[$STEP]=$(($(date +%s) - now))
    if ((RC[$STEP] == 124 || RC[$STEP] == 137)); then
        STATUS[$STEP]="FAILED: cut at its time cap (exit ${RC[$STEP]})"
    elif ((RC[$STEP])); then
        STATUS[$STEP]="FAILED (exit ${RC[$STEP]})"
    elif [[ -f $OUT_DIR/logs/$STEP.skip ]]; then
        STATUS[$STEP]="skipped: $(head -n 1 "$OUT_DIR/logs/$STEP.skip")"
    else
        STATUS[$STEP]=ok
    fi
    [[ ${STATUS[$STEP]} == ok ]] && [[ -n ${RUN_CONFIG[$STEP]:-} && -z $STUB ]] && \
        [[ ! -f $OUT_DIR/runs/${RUN_CONFIG[$STEP]}/ceilings.json ]] && STATUS[$STEP]="FAILED: no ceilings.json"
    [[ ${STATUS[$STEP]} == FAILED* ]] && failed=1
    checkpoint "$STEP"
    unsaid=0
done
# Steps the budget left out after the last checkpoint: said in a last one.
((unsaid)) && checkpoint "$STEP (the budget was spent)"
kill "$SMI_PID" 2>/dev/null

echo
cat "$OUT_DIR/summary.txt"
exit $failed
