#!/usr/bin/env python3
"""Writes a prompts file for throughput figures: N prompts of common English words with
prompt lengths drawn uniformly from [--min-input, --max-input] words (about one token each
with the DeepSeek V3 tokenizer) and max_tokens from [--min-output, --max-output], with
ignore_eos so every request produces exactly its max_tokens. Fixed seed: same file every run.

usage: tools/make_bench_prompts.py --n 64 --min-input 128 --max-input 256 \
           --min-output 64 --max-output 128 --seed 0 > prompts.jsonl
"""
import argparse
import json
import random

WORDS = ("the of and to in is was for that with as on by at from his her an it be are this had not but "
         "which they were all their one has been have who more when there can some other time would into "
         "than its only over also new first after what these may such made most years many two out well "
         "through work between about year being world up under people during state both city where while "
         "life used three day because part then made before each school known could any within same long").split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--min-input", type=int, default=128)
    ap.add_argument("--max-input", type=int, default=256)
    ap.add_argument("--min-output", type=int, default=64)
    ap.add_argument("--max-output", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=1.0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for i in range(a.n):
        n_in = rng.randint(a.min_input, a.max_input)
        words = [rng.choice(WORDS) for _ in range(n_in - 1)]  # BOS makes up the last token
        line = {"prompt": " ".join(words), "max_tokens": rng.randint(a.min_output, a.max_output),
                "temperature": a.temperature, "seed": a.seed * 100003 + i, "ignore_eos": True}
        print(json.dumps(line))


if __name__ == "__main__":
    main()
