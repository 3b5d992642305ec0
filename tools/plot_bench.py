#!/usr/bin/env python3
"""Plots a `gannet bench decode` sweep: tokens/s per user against total tokens/s, one
labelled point per batch size (the Pareto curve DeepInfer publishes), with the ceiling
that memory bandwidth puts on batch-1 decode drawn as a dashed line.

usage: tools/plot_bench.py DECODE.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        d = json.load(f)
    if d.get("bench") != "decode":
        sys.exit(f"{sys.argv[1]}: not a decode bench result")
    rows = d["rows"]
    total = [r["tokens_per_s"] for r in rows]
    per_user = [r["tokens_per_s_per_user"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.plot(total, per_user, "o-", color="tab:blue", label="gannet decode")
    for r, x, y in zip(rows, total, per_user):
        ax.annotate(f"bs={r['batch_size']}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    # Bandwidth ceiling: every token of every user needs all weights streamed once per step,
    # so tokens/s per user <= bandwidth / bytes per step (weights + KV at batch 1).
    r0 = rows[0]
    bytes_per_step = r0["gb_per_s"] / r0["tokens_per_s_per_user"]  # GB per step at that batch
    bw = r0.get("read_gb_per_s", d["roofline"]["read_gb_per_s"])
    ceiling = bw / bytes_per_step
    ax.axhline(ceiling, color="tab:red", linestyle="--",
               label=f"bandwidth ceiling at batch {r0['batch_size']} ({bw:.0f} GB/s read)")
    ax.set_xlabel("total tokens/s")
    ax.set_ylabel("tokens/s per user")
    ax.set_title(f"decode: {d['model']} ({d['threads']} threads, {d['kernel_path']})\n"
                 f"input {d.get('input_len')} tokens, rev {d['git_revision']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
