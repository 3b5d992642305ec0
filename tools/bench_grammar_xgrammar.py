#!/usr/bin/env python3
"""XGrammar on gannet's grammar benchmark: same JSON schemas, same token sequences, same protocol.

Measures XGrammar (PyPI `xgrammar`, written against 0.2.8) so its numbers can be put beside
gannet's own grammar benchmark. Only the timed protocol below is meant to match gannet's; all
else (tokenizing, checks of invalid documents) is outside the timed calls.

Inputs
  --suite PATH      JSON lines, one schema a line:
                      {"name": str, "schema": {...}, "valid": [compact JSON doc strings],
                       "invalid": [...]}
                    Blank lines are skipped and do not count as entries: "schema index" below
                    means the 0-based index among the non-blank lines.
  --tokens PATH     JSON lines {"schema": <schema index>, "doc": <index into its "valid">,
                    "ids": [token ids]}: each valid document as gannet tokenized it. Without it
                    the script tokenizes every valid document itself (HF tokenizer, no special
                    tokens); --write-tokens PATH then writes those sequences in the same format.
  --tokenizer PATH  HuggingFace tokenizer.json (DeepSeek-V3: assets/tokenizers/deepseek-v3/).
  --vocab-size N    the model's vocabulary size, larger than the tokenizer's (129280 for
                    DeepSeek-V3), so the bitmask covers every logit.
  --eos TOKEN       the end-of-sequence token (default <｜end▁of▁sentence｜>).
  --threads N       GrammarCompiler(max_threads=N) (default 1).
  --no-cache        a fresh GrammarCompiler(cache_enabled=False) for every schema, so no compile
                    is a cache hit. Without it one compiler with its cache on is shared.
  --out PATH        JSON results (below).

Protocol (gannet's benchmark does the same)
  For each schema, in suite order:
    compile: time (ms) of
        compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                     separators=(",", ":"), strict_mode=True)
      i.e. compact JSON, no whitespace anywhere. NB: in xgrammar 0.2.8 any_whitespace=False
      ALONE still emits ", " and ": " (its default separators); separators=(",", ":") is what
      makes it compact. strict_mode=True (the default) forbids members and items the schema
      does not declare, as gannet does for an absent additionalProperties. Properties keep the
      schema's order (any_order=False, the default), as in gannet.
      A schema XGrammar refuses is listed in compile_failures and its sequences skipped.
    then for each of its token sequences:
      a new GrammarMatcher(compiled, override_stop_tokens=[eos]);
      for each token id:
        time (us, time.perf_counter_ns around just this one call)
            matcher.fill_next_token_bitmask(bitmask)      # bitmask: xgr.allocate_token_bitmask
        check the id's bit is set (a miss is a token failure, the sequence goes on);
        matcher.accept_token(id)  (False is a token failure and ends the sequence);
      after the last token: time one more fill (the end-of-document mask) and check that the
      EOS id is allowed (a token failure "eos_not_allowed" if not).
  Python's garbage collector is off during each sequence. Each timed fill includes the
  Python -> C++ (tvm-ffi, DLPack) call overhead; "ffi_call_us" in the output estimates it
  (a trivial matcher.is_terminated() call timed the same way).
  Percentiles are nearest-rank on the sorted list: p_q = sorted[ceil(q*n) - 1] (exact
  integer arithmetic, so p99 of 100 values is the 99th).

  After all timing, unless --no-check-invalid: every "invalid" document of a compiled schema
  is fed whole with accept_string, and any XGrammar accepts as a complete document is listed
  in invalid_accepted (grammars that ignore a keyword show up here). Untimed.

Output (--out)
  {"engine": "xgrammar", "version": ..., "schemas": n,
   "compile_failures": [{"name", "error"}],
   "compile_ms": {"p50", "p99", "max", "mean"},
   "mask_us": {"p50", "p99", "max", "mean", "n"},
   "token_failures": [{"name", "schema", "doc", "pos", "id", "token", "kind"}],
   "per_schema": [{"name", "compile_ms", "mask_us_max", "n_masks"}],
   ... plus "settings", "ffi_call_us", "sequences", "sequences_skipped" (those of refused
   schemas), "invalid_accepted", "decode_mismatches" (sequences whose ids do not decode to
   their document: a sign of a wrong --tokens file; they are still measured)}
  and a one-paragraph summary on stdout.

Caveats (seen with 0.2.8)
  XGrammar compiles, ignoring them, keywords gannet refuses by name: not, if/then,
  uniqueItems, contains, dependentRequired, patternProperties, unknown keywords and formats,
  even a $ref to another document; so compile_failures differ between the engines, and its
  grammar may be looser (invalid_accepted shows where the suite catches it). It refuses a
  $ref it cannot resolve, minProperties above the declared properties with no additional
  ones, and regex backreferences. maxLength on a string is costly to compile (maxLength 40:
  ~0.7 s). The first fill of each sequence (the matcher's start state) costs ~100-250 us.

Setup and run: its own virtualenv, ~5.6 GB because xgrammar requires torch and plain PyPI
torch is the CUDA build (it runs on CPU); .venv-xgr is in the repo's .gitignore.
First `gannet bench grammar --suite tests/data/json_schema_suite.jsonl --write-tokens
build/grammar-tokens.jsonl` writes the token sequences, then:
    python3 -m venv .venv-xgr
    .venv-xgr/bin/pip install -r tools/requirements-grammar-bench.txt
    .venv-xgr/bin/python tools/bench_grammar_xgrammar.py \\
        --suite tests/data/json_schema_suite.jsonl \\
        --tokens build/grammar-tokens.jsonl \\
        --tokenizer assets/tokenizers/deepseek-v3/tokenizer.json --vocab-size 129280 \\
        --threads 1 --no-cache --out build/xgrammar-bench.json
"""
import argparse
import gc
import json
import math
import os
import platform
import sys
import time
from fractions import Fraction
from importlib import metadata

DEFAULT_EOS = "<｜end▁of▁sentence｜>"


def nearest_rank(sorted_vals, q):
    """p_q = sorted[ceil(q*n) - 1], q given as a Fraction so 0.99*100 is exactly 99."""
    n = len(sorted_vals)
    if n == 0:
        return None
    k = math.ceil(Fraction(q) * n)
    return sorted_vals[max(k, 1) - 1]


def stats(vals, with_n=False):
    s = sorted(vals)
    out = {
        "p50": nearest_rank(s, Fraction(1, 2)),
        "p99": nearest_rank(s, Fraction(99, 100)),
        "max": s[-1] if s else None,
        "mean": (sum(s) / len(s)) if s else None,
    }
    if with_n:
        out["n"] = len(s)
    return out


def read_jsonl(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{lineno}: not JSON: {e}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", required=True)
    ap.add_argument("--tokens")
    ap.add_argument("--write-tokens")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--vocab-size", type=int, default=129280)
    ap.add_argument("--eos", default=DEFAULT_EOS)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-check-invalid", action="store_true")
    a = ap.parse_args()

    import torch  # noqa: F401  (xgrammar's bitmask is a torch tensor)
    import transformers
    import xgrammar as xgr

    version = metadata.version("xgrammar")

    suite = read_jsonl(a.suite)
    for i, e in enumerate(suite):
        for k in ("name", "schema", "valid"):
            if k not in e:
                sys.exit(f"{a.suite}: entry {i} has no {k!r}")

    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=a.tokenizer, eos_token=a.eos)
    eos_id = tok.convert_tokens_to_ids(a.eos)
    if eos_id is None or eos_id == tok.unk_token_id or tok.convert_ids_to_tokens(eos_id) != a.eos:
        sys.exit(f"EOS token {a.eos!r} is not in {a.tokenizer}")
    if a.vocab_size < len(tok):
        sys.exit(f"--vocab-size {a.vocab_size} is smaller than the tokenizer's {len(tok)}")
    tinfo = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=a.vocab_size, stop_token_ids=[eos_id])

    # Token sequences: gannet's, or our own.
    seqs = []  # (schema index, doc index, ids)
    if a.tokens:
        for r in read_jsonl(a.tokens):
            si, di, ids = r["schema"], r["doc"], r["ids"]
            if not (0 <= si < len(suite)) or not (0 <= di < len(suite[si]["valid"])):
                sys.exit(f"{a.tokens}: schema {si} doc {di} is not in the suite")
            seqs.append((si, di, [int(t) for t in ids]))
    else:
        for si, e in enumerate(suite):
            for di, doc in enumerate(e["valid"]):
                seqs.append((si, di, tok.encode(doc, add_special_tokens=False)))
    if a.write_tokens:
        with open(a.write_tokens, "w", encoding="utf-8") as f:
            for si, di, ids in seqs:
                f.write(json.dumps({"schema": si, "doc": di, "ids": ids}) + "\n")

    # Sequences whose ids do not spell the document (wrong file, other tokenizer): noted only.
    decode_mismatches = []
    for si, di, ids in seqs:
        if tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) != suite[si]["valid"][di]:
            decode_mismatches.append({"name": suite[si]["name"], "schema": si, "doc": di})
    by_schema = {}
    for si, di, ids in seqs:
        by_schema.setdefault(si, []).append((di, ids))

    def tok_text(i):
        try:
            return tok.convert_ids_to_tokens(int(i))
        except Exception:  # ids past the tokenizer (padding of the model's vocabulary)
            return None

    bitmask = xgr.allocate_token_bitmask(1, tinfo.vocab_size)
    bm = bitmask.numpy()[0]  # a view of the same memory: read bits without torch indexing cost

    def allowed(i):
        return bool((int(bm[i >> 5]) >> (i & 31)) & 1)

    shared = None
    if not a.no_cache:
        shared = xgr.GrammarCompiler(tinfo, max_threads=a.threads, cache_enabled=True)

    compile_failures, compile_ms_all, mask_us_all = [], [], []
    token_failures, per_schema, compiled_by_index = [], [], {}
    ffi_us = []
    n_sequences = 0
    n_skipped = 0  # sequences of schemas the compiler refused

    for si, e in enumerate(suite):
        name = e["name"]
        compiler = shared or xgr.GrammarCompiler(tinfo, max_threads=a.threads, cache_enabled=False)
        schema_str = json.dumps(e["schema"])
        try:
            t0 = time.perf_counter_ns()
            cg = compiler.compile_json_schema(schema_str, any_whitespace=False,
                                              separators=(",", ":"), strict_mode=True)
            t1 = time.perf_counter_ns()
        except Exception as ex:  # xgrammar raises its own error types (InvalidJSONSchemaError, ...)
            compile_failures.append({"name": name, "error": f"{type(ex).__name__}: {str(ex).strip()}"})
            n_skipped += len(by_schema.get(si, []))
            continue
        cms = (t1 - t0) / 1e6
        compile_ms_all.append(cms)
        compiled_by_index[si] = cg
        schema_masks = []

        for di, ids in by_schema.get(si, []):
            n_sequences += 1
            m = xgr.GrammarMatcher(cg, override_stop_tokens=[eos_id])
            gc.collect()
            gc.disable()
            try:
                stopped = False
                for pos, tid in enumerate(ids):
                    t0 = time.perf_counter_ns()
                    m.fill_next_token_bitmask(bitmask)
                    t1 = time.perf_counter_ns()
                    schema_masks.append((t1 - t0) / 1e3)
                    if not (0 <= tid < tinfo.vocab_size) or not allowed(tid):
                        token_failures.append({"name": name, "schema": si, "doc": di, "pos": pos,
                                               "id": tid, "token": tok_text(tid), "kind": "mask_miss"})
                    if not m.accept_token(tid):
                        token_failures.append({"name": name, "schema": si, "doc": di, "pos": pos,
                                               "id": tid, "token": tok_text(tid), "kind": "rejected"})
                        stopped = True
                        break
                if not stopped:
                    t0 = time.perf_counter_ns()
                    m.fill_next_token_bitmask(bitmask)
                    t1 = time.perf_counter_ns()
                    schema_masks.append((t1 - t0) / 1e3)
                    if not allowed(eos_id):
                        token_failures.append({"name": name, "schema": si, "doc": di, "pos": len(ids),
                                               "id": eos_id, "token": a.eos, "kind": "eos_not_allowed"})
                # FFI overhead estimate: a trivial binding call, timed the same way.
                for _ in range(8):
                    t0 = time.perf_counter_ns()
                    m.is_terminated()
                    t1 = time.perf_counter_ns()
                    ffi_us.append((t1 - t0) / 1e3)
            finally:
                gc.enable()

        mask_us_all.extend(schema_masks)
        per_schema.append({"name": name, "compile_ms": cms,
                           "mask_us_max": max(schema_masks) if schema_masks else None,
                           "mask_us_p50": nearest_rank(sorted(schema_masks), Fraction(1, 2)),
                           "n_masks": len(schema_masks)})

    invalid_accepted = []
    if not a.no_check_invalid:
        for si, cg in compiled_by_index.items():
            for di, doc in enumerate(suite[si].get("invalid", [])):
                if isinstance(doc, dict):  # {"doc": ..., "bad_at": ..., "why": ...}
                    doc = doc["doc"]
                m = xgr.GrammarMatcher(cg, override_stop_tokens=[eos_id])
                if m.accept_string(doc) and m.is_completed():
                    invalid_accepted.append({"name": suite[si]["name"], "schema": si, "doc": di})

    result = {
        "engine": "xgrammar",
        "version": version,
        "schemas": len(suite),
        "compile_failures": compile_failures,
        "compile_ms": stats(compile_ms_all),
        "mask_us": stats(mask_us_all, with_n=True),
        "token_failures": token_failures,
        "per_schema": per_schema,
        "sequences": n_sequences,
        "sequences_skipped": n_skipped,
        "ffi_call_us": stats(ffi_us, with_n=True),
        "invalid_accepted": invalid_accepted if not a.no_check_invalid else None,
        "decode_mismatches": decode_mismatches,
        "settings": {
            "threads": a.threads,
            "cache": not a.no_cache,
            "compile_json_schema": {"any_whitespace": False, "separators": [",", ":"],
                                    "strict_mode": True, "any_order": False},
            "tokens": a.tokens or "self-tokenized (no special tokens)",
            "tokenizer": a.tokenizer,
            "vocab_size": tinfo.vocab_size,
            "eos": a.eos,
            "eos_id": eos_id,
            "vocab_type": str(tinfo.vocab_type),
            "torch": metadata.version("torch"),
            "transformers": metadata.version("transformers"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")

    def fmt(v, d=1):
        return "n/a" if v is None else f"{v:.{d}f}"

    cm, mu = result["compile_ms"], result["mask_us"]
    print(
        f"xgrammar {version}: {len(suite)} schemas, {len(compile_failures)} refused by the compiler; "
        f"compile ({'no cache, ' if a.no_cache else 'cache on, '}{a.threads} thread(s)) "
        f"p50 {fmt(cm['p50'], 2)} ms, p99 {fmt(cm['p99'], 2)} ms, max {fmt(cm['max'], 2)} ms, "
        f"mean {fmt(cm['mean'], 2)} ms; {mu['n']} mask fills over {n_sequences} token sequences: "
        f"p50 {fmt(mu['p50'])} us, p99 {fmt(mu['p99'])} us, max {fmt(mu['max'])} us, "
        f"mean {fmt(mu['mean'])} us (Python call overhead about {fmt(result['ffi_call_us']['p50'], 2)} us); "
        f"{len(token_failures)} token failures"
        + (f", {len(invalid_accepted)} invalid documents accepted" if not a.no_check_invalid else "")
        + (f", {len(decode_mismatches)} sequences that do not decode to their document"
           if decode_mismatches else "")
        + f". Results in {a.out}."
    )


if __name__ == "__main__":
    main()
