#!/usr/bin/env bash
# The GPU acceptance run: everything a first session on an NVIDIA GPU machine should run, in one
# command of under 10 minutes (an H100), keeping every output under OUT_DIR. NEVER RUN ON A GPU YET.
#
#   bash benchmarks/gpu_acceptance.sh [--dry-run] [--bring DIR] OUT_DIR
#
# Steps, each under its own time cap inside one overall budget; a failed step does not stop the
# next; each step's exit status and seconds go into OUT_DIR/summary.txt:
#   env                 install the carried wheels (${ERT_WHEELS:-.whl}, made by benchmarks/gpu_wheels.sh)
#                       into a target folder on PYTHONPATH and the project itself (pip -e); print
#                       nvidia-smi, cupy.show_config(), `ert backends`, nvcc and ncu versions
#   run-tiny-gpu        `ert run CONFIG --backend cuda --out OUT_DIR/runs/NAME` (`ert run` is ert-run)
#   run-integer-gpu       for configs/tiny-gpu.yaml, integer-gpu.yaml, gpu-tensor.yaml and
#   run-gpu-tensor        links-network.yaml, then `ert show` and `ert plot` of each run
#   run-links-network
#   ncu                 where ncu exists: Nsight Compute captures of ert's kernels
#                       (benchmarks/gpu_ncu_driver.py) with the metrics `ert profile` reads, exported in
#                       both CSV layouts, and `ert profile` of both against the tiny-gpu ceilings
#   pytest-gpu          pytest -m gpu (junit XML in OUT_DIR; the tests' run directories kept)
#   pytest-nvcc         pytest -m "nvcc and not gpu"
#   summary             benchmarks/gpu_summary.py over every run: measured/rated per ceiling
# The runs come before the tests: the tests repeat the same sweeps with assertions, and when time
# runs short the runs' ceilings are the numbers to keep. At the end OUT_DIR/summary.txt is printed
# and OUT_DIR/acceptance.tar.gz holds all of OUT_DIR; --bring DIR copies those two into DIR (on the
# device tool: --bring "$OUT", since only 8 files come back from there).
#
# Exit status: 0 when every step passed, 1 when any failed or was cut by the budget, 2 when it
# could not start (no NVIDIA GPU, bad arguments). Settings (environment):
#   PYTHON                python with cupy (default python3; the device image's holds cupy-cuda13x)
#   ERT_WHEELS            folder of wheels to install first (default .whl; skipped if it has none)
#   ERT_SITE              where those wheels go (default /tmp/ert-site; put first on PYTHONPATH)
#   ERT_ACCEPT_BUDGET_S   seconds for all steps together (default 540)
#   ERT_ACCEPT_CAPS       per-step caps in seconds, e.g. "run-gpu-tensor=200,pytest-gpu=300"
#   ERT_ACCEPT_STEPS      only these steps, e.g. "pytest-gpu,pytest-nvcc" (summary always runs)
#   ERT_ACCEPT_DRY=1      the same as --dry-run: print every step's commands, run nothing, write nothing
set -uo pipefail

usage() {
    sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
    echo "options: --dry-run (print the steps only), --bring DIR (copy summary.txt and the tarball there)"
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

BUDGET=${ERT_ACCEPT_BUDGET_S:-540}
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "gpu_acceptance.sh: ERT_ACCEPT_BUDGET_S: '$BUDGET' is not a number of seconds" >&2; exit 2; }
RESERVE=45  # kept for the summary (ert analyze of a killed run included) and the tarball
WHEELS=${ERT_WHEELS:-.whl}
SITE=${ERT_SITE:-/tmp/ert-site}
CONFIGS=(tiny-gpu integer-gpu gpu-tensor links-network)
STEPS=(env run-tiny-gpu run-integer-gpu run-gpu-tensor run-links-network ncu pytest-gpu pytest-nvcc)
declare -A CAP=([env]=90 [run-tiny-gpu]=90 [run-integer-gpu]=90 [run-gpu-tensor]=150 [run-links-network]=60
                [ncu]=75 [pytest-gpu]=200 [pytest-nvcc]=120)
# The metrics `ert profile` reads (ert/consumers/ncu_csv.py): time, bytes at L1, L2 and DRAM, FLOPs per
# precision. The optional ones (tensor pipes, integer instructions) are captured apart, only those this
# ncu lists for the GPU, so a name it does not know cannot spoil the main capture.
NCU_METRICS=gpu__time_duration.sum,l1tex__t_bytes.sum,lts__t_bytes.sum,dram__bytes.sum
for p in d f h; do for op in add mul fma; do
    NCU_METRICS+=",sm__sass_thread_inst_executed_op_${p}${op}_pred_on.sum"
done; done
NCU_EXTRA=(sm__inst_executed_pipe_tensor.sum sm__inst_executed_pipe_tensor_op_hmma.sum
           sm__inst_executed_pipe_tensor_op_dmma.sum sm__inst_executed_pipe_tensor_subpipe_hmma.sum
           sm__inst_executed_pipe_tensor_subpipe_dmma.sum sm__sass_thread_inst_executed_op_integer_pred_on.sum)
NCU_KERNELS='regex:^ert_(rw|ro|mma)'

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
"$PY" -c "import pytest_timeout" >/dev/null 2>&1 && PYTEST_EXTRA+=(--timeout=180)

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
        timeout -s INT -k 15 "$left" "$@" >"$to"
    else
        timeout -s INT -k 15 "$left" "$@"
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

# ---------------------------------------------------------------------------- the steps
step_env() {
    x nvidia-smi
    xo nvidia-smi -q -d CLOCK,PCIE,POWER,MEMORY
    if ((${#WHEEL_FILES[@]})); then
        x "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            "${WHEEL_FILES[@]}"
    else
        note "no wheels in $WHEELS: nothing carried to install (bash benchmarks/gpu_wheels.sh makes them)"
    fi
    # ert.kernels and ert.configs exist only in an installed tree (pyproject maps kernels/ and configs/).
    x "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e .
    x "$PY" -c "import ert, ert.kernels, ert.configs, pydantic, jsonschema; print('ert', ert.__version__, ert.__file__)"
    x "$PY" -c "import cupy; cupy.show_config()"
    x "${ERT[@]}" backends
    xo nvcc --version
    xo ncu --version
    xo_to "$OUT_DIR/logs/pip-freeze.txt" "$PY" -m pip freeze
}

step_run() {  # step_run CONFIG_NAME
    local name=$1 run="$OUT_DIR/runs/$1"
    x "${ERT[@]}" run "configs/$name.yaml" --backend cuda --out "$run" -q
    [[ $DRY == 1 || -f $run/ceilings.json ]] || return 0
    xo "${ERT[@]}" show "$run"
    if [[ $name != links-network ]]; then
        xo "${ERT[@]}" plot "$run" -o "$run/roofline.png"
        xo "${ERT[@]}" plot "$run" --sweep -o "$run/sweep.png"
    fi
}

step_ncu() {
    local dir="$OUT_DIR/ncu" rep="$OUT_DIR/ncu/ert-kernels" ceilings="$OUT_DIR/runs/tiny-gpu"
    x mkdir -p "$dir"
    x ncu --target-processes all --clock-control none --kernel-name "$NCU_KERNELS" --launch-count 40 \
        --metrics "$NCU_METRICS" -f -o "$rep" "$PY" benchmarks/gpu_ncu_driver.py
    x_to "$dir/ncu-long.csv" ncu --import "$rep.ncu-rep" --csv
    x_to "$dir/ncu-raw.csv" ncu --import "$rep.ncu-rep" --csv --page raw
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

step_pytest() {  # step_pytest NAME MARKER-EXPRESSION
    x "$PY" -m pytest -q -m "$2" "${PYTEST_EXTRA[@]}" --junitxml="$OUT_DIR/$1.xml" --basetemp="$OUT_DIR/$1-tmp" tests
}

run_named_step() {
    case $1 in
        env) step_env ;;
        run-*) step_run "${1#run-}" ;;
        ncu) step_ncu ;;
        pytest-gpu) step_pytest pytest-gpu gpu ;;
        pytest-nvcc) step_pytest pytest-nvcc "nvcc and not gpu" ;;
    esac
}

# ---------------------------------------------------------------------------- dry run: print and stop
if ((DRY)); then
    echo "gpu_acceptance.sh --dry-run: OUT_DIR $OUT_DIR, python $PY, budget ${BUDGET}s," \
         "wheels: ${#WHEEL_FILES[@]} in $WHEELS"
    OUT_DIR_SHOWN=$OUT_DIR
    for STEP in "${STEPS[@]}"; do
        if ((${#WANT[@]})) && [[ -z ${WANT[$STEP]+x} ]]; then
            echo "[step $STEP] not selected (ERT_ACCEPT_STEPS)"
            continue
        fi
        echo "[step $STEP] cap ${CAP[$STEP]}s"
        if [[ $STEP == ncu ]] && ! command -v ncu >/dev/null 2>&1; then
            note "ncu is not on PATH here: on the GPU machine this step is skipped where it is missing"
        fi
        run_named_step "$STEP"
    done
    echo "[step summary]"
    echo "+ $(quote "$PY" benchmarks/gpu_summary.py "$OUT_DIR_SHOWN/runs/${CONFIGS[0]}" "..." --json "$OUT_DIR/summary.json")"
    echo "+ $(quote tar -czf "$OUT_DIR/acceptance.tar.gz" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")")"
    exit 0
fi

# ---------------------------------------------------------------------------- the real run
mkdir -p "$OUT_DIR/logs" "$OUT_DIR/runs" || exit 2
START=$(date +%s)
END=$((START + BUDGET))
declare -A RC=() SECS=() STATUS=()

# Clocks, power and temperature every half second for the whole run.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
    --format=csv -lms 500 >"$OUT_DIR/nvidia-smi-log.csv" 2>&1 &
SMI_PID=$!
trap 'kill "$SMI_PID" 2>/dev/null' EXIT

echo "gpu_acceptance.sh: $(date -u +%FT%TZ) on $(uname -n), $(head -n 1 <<<"$gpus"), budget ${BUDGET}s, OUT_DIR $OUT_DIR"
for STEP in "${STEPS[@]}"; do
    if ((${#WANT[@]})) && [[ -z ${WANT[$STEP]+x} ]]; then
        STATUS[$STEP]="not selected"
        continue
    fi
    if [[ $STEP == ncu ]] && ! command -v ncu >/dev/null 2>&1; then
        STATUS[$STEP]="skipped: ncu not on PATH"
        continue
    fi
    now=$(date +%s)
    STEP_DEADLINE=$((now + CAP[$STEP]))
    ((STEP_DEADLINE <= END - RESERVE)) || STEP_DEADLINE=$((END - RESERVE))
    if ((STEP_DEADLINE - now < 10)); then
        STATUS[$STEP]="FAILED: not run, the ${BUDGET}s budget was spent"
        RC[$STEP]=124
        continue
    fi
    echo
    echo "=== [step $STEP] cap $((STEP_DEADLINE - now))s ($(date -u +%H:%M:%S))"
    log="$OUT_DIR/logs/$STEP.log"
    (
        STEP_RC=0
        run_named_step "$STEP"
        echo "$STEP_RC" >"$OUT_DIR/logs/$STEP.rc"
    ) 2>&1 | tee "$log"
    RC[$STEP]=$(cat "$OUT_DIR/logs/$STEP.rc" 2>/dev/null || echo 1)
    SECS[$STEP]=$(($(date +%s) - now))
    if ((RC[$STEP] == 0)); then
        STATUS[$STEP]=ok
    elif ((RC[$STEP] == 124 || RC[$STEP] == 137)); then
        STATUS[$STEP]="FAILED: cut at its time cap (exit ${RC[$STEP]})"
    else
        STATUS[$STEP]="FAILED (exit ${RC[$STEP]})"
    fi
done

# ---------------------------------------------------------------------------- summary
echo
echo "=== [step summary] ($(date -u +%H:%M:%S))"
kill "$SMI_PID" 2>/dev/null
runs=()  # every run asked for: one that left nothing is reported as such
for name in "${CONFIGS[@]}"; do
    [[ ${STATUS[run-$name]:-} == "not selected" ]] && continue
    run="$OUT_DIR/runs/$name"
    runs+=("$run")
    # Interrupted at its cap, ert-run writes the ceilings of what it measured; killed, it leaves only raw.jsonl:
    # then the points measured are analysed apart (ceilings-partial.json, marked partial in the summary).
    if [[ ! -f $run/ceilings.json && -s $run/raw.jsonl ]]; then
        echo "+ $(quote "${ERT[@]}" analyze "$run" -o "$run/ceilings-partial.json")"
        timeout -k 5 20 "${ERT[@]}" analyze "$run" -o "$run/ceilings-partial.json" >"$OUT_DIR/logs/analyze-$name.log" 2>&1 \
            || echo "!! exit $?: ert analyze $run (logs/analyze-$name.log)"
    fi
done
ceilings_rc=0
if ((${#runs[@]})); then
    timeout -k 5 60 "$PY" benchmarks/gpu_summary.py "${runs[@]}" --json "$OUT_DIR/summary.json" \
        >"$OUT_DIR/ceilings-summary.txt" 2>&1
    ceilings_rc=$?
else
    echo "no runs selected" >"$OUT_DIR/ceilings-summary.txt"
fi
junit() {  # tests, failures, errors, skipped of a junit XML
    "$PY" - "$1" <<'EOF' 2>/dev/null || echo "unreadable"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
print(", ".join(f"{v} {k}" for k, v in total.items()))
EOF
}
failed=0
{
    echo "gpu_acceptance.sh summary: $(date -u +%FT%TZ), host $(uname -n)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 \
        | sed 's/^/GPU: /'
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); python $("$PY" -V 2>&1);" \
         "budget ${BUDGET}s, used $(($(date +%s) - START))s"
    echo
    printf '%-18s %6s %5s  %s\n' step exit secs status
    for STEP in "${STEPS[@]}"; do
        status=${STATUS[$STEP]:-}
        [[ $status == FAILED* ]] && failed=1
        detail=""
        [[ $STEP == pytest-* && -f $OUT_DIR/$STEP.xml ]] && detail="; $(junit "$OUT_DIR/$STEP.xml")"
        printf '%-18s %6s %5s  %s\n' "$STEP" "${RC[$STEP]:--}" "${SECS[$STEP]:--}" "$status$detail"
    done
    if [[ -s $OUT_DIR/logs/optional-failures.txt ]]; then
        echo
        echo "informational commands that failed (not counted):"
        sed 's/^/  /' "$OUT_DIR/logs/optional-failures.txt"
    fi
    echo
    echo "measured/rated per ceiling (benchmarks/gpu_summary.py, exit $ceilings_rc):"
    cat "$OUT_DIR/ceilings-summary.txt"
    echo
    echo "every output: $OUT_DIR (logs/STEP.log, runs/NAME, ncu/, pytest-*.xml, nvidia-smi-log.csv)"
} >"$OUT_DIR/summary.txt"
((ceilings_rc == 0)) || failed=1

tar -czf "$OUT_DIR/acceptance.tar.gz" --exclude=acceptance.tar.gz -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")"
size=$(stat -c %s "$OUT_DIR/acceptance.tar.gz" 2>/dev/null || echo 0)
if ((size > 15 * 1024 * 1024)); then  # over what the device tool brings back: drop the bulky parts
    tar -czf "$OUT_DIR/acceptance.tar.gz" --exclude=acceptance.tar.gz --exclude='*.ncu-rep' --exclude='pytest-*-tmp' \
        -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")"
    echo "(acceptance.tar.gz without *.ncu-rep and the pytest folders: the whole was $((size >> 20)) MiB)" \
        >>"$OUT_DIR/summary.txt"
fi
if [[ -n $BRING ]]; then
    mkdir -p "$BRING" && cp "$OUT_DIR/summary.txt" "$OUT_DIR/acceptance.tar.gz" "$BRING"/
fi
cat "$OUT_DIR/summary.txt"
exit $failed
