#!/usr/bin/env bash
# gannet next to llama.cpp's `deepseek4` architecture on one DeepSeek-V4-Flash-format
# checkpoint, for performance figures only. Nothing in gannet's build or tests calls this.
#
# Steps, each skipped when its output is already there:
#   1. fetch the llama-cpp-python sdist from PyPI (it vendors llama.cpp at commit 0c1e570)
#   2. build llama.cpp's tools outside the repository
#   3. make a Python venv with what llama.cpp's converter imports (torch, transformers, ...)
#   4. write a random-weight gannet checkpoint (gannet make-model --arch deepseek_v4)
#   5. convert it to GGUF with llama.cpp's converter, through convert_v4_gguf.py, which
#      supplies a synthetic one-token-per-id vocabulary (the checkpoint has no tokenizer)
#   6. greedy check: the first GREEDY_N greedy ids of both engines on one prompt of ids
#   7. PAIRS rounds of A/B runs, gannet then llama.cpp, for decode at batch 1, decode at
#      batch 32 and prefill of PREFILL_LEN tokens; then medians and gannet/llama.cpp ratios
#
# usage: tools/llamacpp_deepseek4/side_by_side.sh [STEP ...]
#   STEP: fetch build venv model convert greedy bench (default: all, in that order).
# Run it while the machine is otherwise idle: both engines get THREADS threads.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

# ---- settings (environment variables) -----------------------------------------------
WORK="${WORK:-${TMPDIR:-/tmp}/gannet-llamacpp}"   # sdist, llama.cpp build, venv, GGUF, model
LCPP_VERSION="${LCPP_VERSION:-0.3.36}"            # llama-cpp-python sdist version
LLAMA_SRC="${LLAMA_SRC:-$WORK/llama_cpp_python-$LCPP_VERSION/vendor/llama.cpp}"
LBUILD="${LBUILD:-$WORK/lbuild}"                  # llama.cpp build folder
VENV="${VENV:-$WORK/venv}"                        # converter's Python
GANNET="${GANNET:-$REPO/build/gannet}"            # a built gannet binary
PRESET="${PRESET:-small}"                         # gannet make-model preset
MODEL="${MODEL:-$WORK/v4-$PRESET}"                # gannet checkpoint folder
GGUF="${GGUF:-$WORK/v4-$PRESET.gguf}"             # converted model
THREADS="${THREADS:-2}"
LLAMA_REPACK="${LLAMA_REPACK:-1}"                 # 0: llama.cpp without extra buffer types
PAIRS="${PAIRS:-5}"                               # A/B rounds
INPUT_LEN="${INPUT_LEN:-128}"                     # context before timed decode steps
OUT_B1="${OUT_B1:-64}"                            # decode tokens timed at batch 1
OUT_B32="${OUT_B32:-32}"                          # decode steps timed at batch 32
BATCH="${BATCH:-32}"
PREFILL_LEN="${PREFILL_LEN:-512}"
GREEDY_N="${GREEDY_N:-8}"
NICE="${NICE:-nice -n 10}"                        # set NICE= for the real timing series

BIN="$LBUILD/bin"
NO_REPACK=""; [ "$LLAMA_REPACK" = 0 ] && NO_REPACK="-nr"   # common-args tools' spelling
RES="$WORK/results"
mkdir -p "$WORK" "$RES"
log() { printf '== %s\n' "$*" >&2; }

# ---- 1. llama.cpp source ------------------------------------------------------------
step_fetch() {
    [ -f "$LLAMA_SRC/convert_hf_to_gguf.py" ] && return
    local tgz="$WORK/llama_cpp_python-$LCPP_VERSION.tar.gz"
    if [ ! -f "$tgz" ]; then
        log "downloading llama-cpp-python $LCPP_VERSION sdist"
        python3 -m pip download --no-deps --no-binary llama-cpp-python \
            "llama-cpp-python==$LCPP_VERSION" -d "$WORK"
    fi
    tar -xzf "$tgz" -C "$WORK"
}

# ---- 2. llama.cpp build (CPU, native, about 15 min on 2 cores) ----------------------
# AMX is left out of ggml (-mno-amx-*; -march=native would turn it on where the CPU flags
# it). On our 2-core VM llama.cpp's AMX path is unusable for deepseek4: its AMX buffer
# takes the Q8_0 weights, then (a) the graph scheduler aborts on the grouped attn_output_a
# product, which the AMX buffer does not support ("GGML_ASSERT(*cur_backend_id != -1)"),
# and (b) with that tensor moved out, any batch > 1 dies in the AMX kernel (SIGILL on
# tilezero, or SIGSEGV). Without AMX, the Q8_0 weights sit in the plain CPU buffer and
# the MXFP4 experts in CPU_REPACK (8x8 interleaved), which works at every batch size.
# LLAMA_NO_AMX=0 keeps an AMX build; then run with LLAMA_REPACK=0 (no extra buffer
# types at all, experts unrepacked too).
LLAMA_NO_AMX="${LLAMA_NO_AMX:-1}"
LLAMA_TARGETS=(llama-bench llama-batched-bench llama-completion)
step_build() {
    local t missing=0 flags=""
    [ "$LLAMA_NO_AMX" = 1 ] && flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    for t in "${LLAMA_TARGETS[@]}"; do [ -x "$BIN/$t" ] || missing=1; done
    if [ -f "$LBUILD/CMakeCache.txt" ] &&
        ! grep -qx "CMAKE_CXX_FLAGS:STRING=$flags" "$LBUILD/CMakeCache.txt"; then
        missing=1   # configured with other flags: reconfigure (a full rebuild)
    fi
    [ "$missing" = 0 ] && return
    log "building llama.cpp into $LBUILD (CXX flags: '${flags}')"
    cmake -S "$LLAMA_SRC" -B "$LBUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" > "$RES/cmake.log"
    # (this llama.cpp has no llama-cli target; llama-completion is the old CLI)
    $NICE ninja -C "$LBUILD" "${LLAMA_TARGETS[@]}"
}

# ---- 3. converter venv --------------------------------------------------------------
# convert_hf_to_gguf imports torch and transformers at the top (pins from its
# requirements file); gguf comes from the vendored gguf-py, which the converter puts on
# sys.path itself. PyPI's torch wheel drags in the CUDA wheels (a few GB) but runs on CPU.
step_venv() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch, transformers, safetensors' 2>/dev/null && return
    log "making venv $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "torch==2.11.0" "numpy~=2.2.6" "transformers==4.57.6" \
        safetensors sentencepiece "protobuf>=4.21.0,<5.0.0"
}

# ---- 4. gannet checkpoint -----------------------------------------------------------
step_model() {
    [ -f "$MODEL/model.safetensors" ] && return
    log "writing gannet checkpoint $MODEL (preset $PRESET)"
    "$GANNET" make-model --arch deepseek_v4 --preset "$PRESET" --out "$MODEL"
}

# ---- 5. GGUF ------------------------------------------------------------------------
# DeepseekV4Model decides the tensor types whatever --outtype says: FP8 linears are
# dequantized with their E8M0 block scales and stored Q8_0, routed experts are repacked
# bit-for-bit to MXFP4, BF16 matrices stay BF16, F32 and 1-D tensors F32, the hash
# routing tables I32. --outtype q8_0 only covers anything left over.
step_convert() {
    [ -f "$GGUF" ] && [ "$GGUF" -nt "$MODEL/model.safetensors" ] && return
    log "converting $MODEL -> $GGUF"
    $NICE "$VENV/bin/python" "$HERE/convert_v4_gguf.py" "$LLAMA_SRC" "$MODEL" \
        --outfile "$GGUF" --outtype q8_0 > "$RES/convert.log" 2>&1 \
        || { tail -30 "$RES/convert.log"; exit 1; }
    { grep -oE -- "--> [A-Z0-9_]+" "$RES/convert.log"; grep -oE "to (MXFP4|I32)" "$RES/convert.log"; } \
        | sort | uniq -c >&2   # tensor count per stored type
}

# ---- 6. greedy agreement ------------------------------------------------------------
# Prompt: bos, then ids spread over the vocabulary. llama-completion gets them as the
# synthetic vocabulary's texts "<|ID|>" and prints the continuation the same way.
step_greedy() {
    local vocab ids text
    vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$MODEL/config.json")
    ids=$(python3 -c "v=$vocab; print(','.join(str(x) for x in [0]+[(37+i*7919)%(v-2)+2 for i in range(11)]))")
    text=$(python3 -c "print(''.join('<|%s|>' % i for i in '$ids'.split(',')))")
    log "greedy: prompt ids [$ids]"

    echo "{\"prompt_token_ids\": [$ids]}" > "$RES/greedy_prompt.jsonl"
    $NICE "$GANNET" generate --model "$MODEL" --prompts "$RES/greedy_prompt.jsonl" --temperature 0 \
        --max-tokens "$GREEDY_N" --threads "$THREADS" --json 2> "$RES/greedy_gannet.err" \
        | python3 -c "import json,sys; print(*json.loads(sys.stdin.readline())['token_ids'])" \
        > "$RES/greedy_gannet.txt"

    # --temp 0 --top-k 1: argmax; --no-display-prompt: stdout is the continuation only
    $NICE "$BIN/llama-completion" -m "$GGUF" -p "$text" -n "$GREEDY_N" --temp 0 --top-k 1 \
        -c 512 -t "$THREADS" -no-cnv --no-warmup --no-display-prompt $NO_REPACK \
        < /dev/null 2> "$RES/greedy_llama.err" \
        | python3 -c "import re,sys; print(*re.findall(r'<\|(\d+)\|>', sys.stdin.read()))" \
        > "$RES/greedy_llama.txt"

    python3 - "$RES/greedy_gannet.txt" "$RES/greedy_llama.txt" <<'EOF'
import sys
g, l = (open(p).read().split() for p in sys.argv[1:3])
n = 0
while n < min(len(g), len(l)) and g[n] == l[n]:
    n += 1
print(f"gannet    : {' '.join(g)}")
print(f"llama.cpp : {' '.join(l)}")
print(f"greedy agreement: first {n} of {max(len(g), len(l))} ids equal")
EOF
}

# ---- 7. timings ---------------------------------------------------------------------
# gannet: `bench decode` (tokens_per_s over the timed steps, after an INPUT_LEN-token
# prefill) and `bench prefill` (tokens_per_s of one PREFILL_LEN prompt).
# llama.cpp: llama-bench for batch 1 (-d INPUT_LEN puts the same context in front) and
# prefill, llama-batched-bench for batch 32 (S_TG, INPUT_LEN prompt per sequence).
# No mmap for llama.cpp (-lm none), as gannet reads its weights into memory.
g_decode() {  # batch, output len -> tok/s
    $NICE "$GANNET" bench decode --model "$MODEL" --threads "$THREADS" --batch-sizes "$1" \
        --input-len "$INPUT_LEN" --output-len "$2" --json "$RES/g.json" > "$RES/g.out" 2>&1
    python3 -c "import json; print(json.load(open('$RES/g.json'))['rows'][0]['tokens_per_s'])"
}
g_prefill() {
    $NICE "$GANNET" bench prefill --model "$MODEL" --threads "$THREADS" --lengths "$PREFILL_LEN" \
        --repeats 3 --json "$RES/g.json" > "$RES/g.out" 2>&1
    python3 -c "import json; print(json.load(open('$RES/g.json'))['rows'][0]['tokens_per_s'])"
}
l_bench() {  # llama-bench args -> avg t/s
    $NICE "$BIN/llama-bench" -m "$GGUF" -t "$THREADS" -lm none --repack "$LLAMA_REPACK" -o jsonl "$@" > "$RES/l.out" 2> "$RES/l.err"
    python3 -c "import json; print(json.loads(open('$RES/l.out').read().splitlines()[-1])['avg_ts'])"
}
l_batched() {
    $NICE "$BIN/llama-batched-bench" -m "$GGUF" -t "$THREADS" -lm none $NO_REPACK -npp "$INPUT_LEN" \
        -ntg "$OUT_B32" -npl "$BATCH" -c $((BATCH * (INPUT_LEN + OUT_B32))) \
        --output-format jsonl > "$RES/l.out" 2> "$RES/l.err"
    grep -h '^{' "$RES/l.out" "$RES/l.err" | tail -1 | python3 -c "import json,sys; print(json.load(sys.stdin)['speed_tg'])"
}

step_bench() {
    local tsv="$RES/bench.tsv" i
    printf 'round\tcase\tgannet\tllama.cpp\n' > "$tsv"
    for i in $(seq 1 "$PAIRS"); do
        log "round $i/$PAIRS"
        printf '%s\tdecode b1\t%s\t%s\n' "$i" "$(g_decode 1 "$OUT_B1")" \
            "$(l_bench -p 0 -n "$OUT_B1" -d "$INPUT_LEN")" >> "$tsv"
        printf '%s\tdecode b%s\t%s\t%s\n' "$i" "$BATCH" "$(g_decode "$BATCH" "$OUT_B32")" \
            "$(l_batched)" >> "$tsv"
        printf '%s\tprefill %s\t%s\t%s\n' "$i" "$PREFILL_LEN" "$(g_prefill)" \
            "$(l_bench -p "$PREFILL_LEN" -n 0)" >> "$tsv"
    done
    python3 - "$tsv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print(f"{'case':<14} {'gannet tok/s':>13} {'llama.cpp tok/s':>16} {'gannet/llama':>13}  (medians of {len(rows)//3 if rows else 0})")
for case in dict.fromkeys(r["case"] for r in rows):
    g = statistics.median(float(r["gannet"]) for r in rows if r["case"] == case)
    l = statistics.median(float(r["llama.cpp"]) for r in rows if r["case"] == case)
    print(f"{case:<14} {g:13.1f} {l:16.1f} {g / l:13.2f}")
EOF
    log "per-round figures: $tsv"
}

STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(fetch build venv model convert greedy bench)
for s in "${STEPS[@]}"; do
    case "$s" in
        fetch|build|venv|model|convert|greedy|bench) "step_$s" ;;
        *) echo "unknown step $s (fetch build venv model convert greedy bench)" >&2; exit 2 ;;
    esac
done
