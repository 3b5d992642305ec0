#!/usr/bin/env python3
"""Overhead of the Python package against `gannet generate` on the same batch.

Writes --requests prompts (distinct, --prompt-words words each, --max-tokens outputs,
greedy or seeded), then alternates, --runs times: `gannet generate --prompts FILE --json`
in a subprocess, whose own figure "[N requests, T tokens generated in S s]" times its
loop from the first step to the last; and LLM.generate(prompts, params) in this process,
timed from the call to its return (adding the requests, converting every output to
Python objects and the progress bar included). Both run the same engine settings
(--threads) on a freshly loaded engine each run (the package's LLM is made before the
timed call, so the prefix cache starts empty for both). Prints the medians, the per-pair
ratios and their median, the part of the Python call spent outside the engine's steps
(the package's own cost, measured directly rather than as a difference of two noisy
runs), and checks that both produced the same tokens.

  PYTHONPATH=build/python .venv/bin/python tools/python_overhead.py --model DIR
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gannet", default=os.path.join(os.path.dirname(__file__), "..", "build", "gannet"))
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tqdm", action="store_true", help="show the progress bar in the Python runs")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()

    import gannet

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()
    prompts = [" ".join(words[(i * 7 + j) % len(words)] + str(i) for j in range(a.prompt_words))
               for i in range(a.requests)]
    lines = [{"prompt": p, "max_tokens": a.max_tokens, "temperature": a.temperature, "seed": 1000 + i,
              "ignore_eos": True} for i, p in enumerate(prompts)]
    params = [gannet.SamplingParams(max_tokens=a.max_tokens, temperature=a.temperature, seed=1000 + i,
                                    ignore_eos=True) for i in range(a.requests)]
    engine = ["--threads", str(a.threads)] if a.threads else []

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prompts.jsonl")
        with open(path, "w") as f:
            f.write("".join(json.dumps(l) + "\n" for l in lines))
        cpp, py, ratios, outside = [], [], [], []
        for run in range(a.runs):
            p = subprocess.run([a.gannet, "generate", "--model", a.model, "--prompts", path, "--json", *engine],
                               capture_output=True, text=True, check=True)
            m = re.search(r"\[(\d+) requests, (\d+) tokens generated in ([0-9.]+) s", p.stderr)
            if not m:
                sys.exit("no timing line in gannet generate's output:\n" + p.stderr)
            cli_tokens = [json.loads(l)["token_ids"] for l in p.stdout.splitlines()]
            llm = gannet.LLM(model=a.model, quiet=True, **({"threads": a.threads} if a.threads else {}))
            t0 = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=a.tqdm)
            secs = time.perf_counter() - t0
            if [o.outputs[0].token_ids for o in outs] != cli_tokens:
                sys.exit("the Python package and gannet generate produced different tokens")
            cpp.append(float(m.group(3)))
            py.append(secs)
            outside.append(secs - llm._engine.step_seconds)
            ratios.append(secs / float(m.group(3)))
            del llm, outs
            print(f"run {run}: gannet generate {cpp[-1]:.3f} s, LLM.generate {py[-1]:.3f} s, "
                  f"ratio {ratios[-1]:.4f}; Python outside the engine's steps {outside[-1] * 1e3:.1f} ms", flush=True)
    tokens = a.requests * a.max_tokens
    result = {"requests": a.requests, "output_tokens": tokens, "runs": a.runs,
              "cpp_generate_s_median": statistics.median(cpp), "python_generate_s_median": statistics.median(py),
              "ratio_median": statistics.median(ratios), "ratios": ratios,
              "python_outside_steps_s_median": statistics.median(outside),
              "cpp_tok_s_median": tokens / statistics.median(cpp), "python_tok_s_median": tokens / statistics.median(py)}
    print(f"median: gannet generate {result['cpp_generate_s_median']:.3f} s "
          f"({result['cpp_tok_s_median']:.1f} tok/s), LLM.generate {result['python_generate_s_median']:.3f} s "
          f"({result['python_tok_s_median']:.1f} tok/s); Python/C++ ratio median {result['ratio_median']:.4f} "
          f"(overhead {100 * (result['ratio_median'] - 1):+.2f} %); time in Python outside the engine's steps "
          f"{1e3 * result['python_outside_steps_s_median']:.1f} ms "
          f"({100 * result['python_outside_steps_s_median'] / result['python_generate_s_median']:.3f} % of the call)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
