#!/usr/bin/env python3
"""Load test for `gannet serve`: N concurrent streaming clients for T seconds, loopback only.

Starts the server itself (on a free loopback port, with the flags given after `--`), or uses
one already running (--url, with --pid for its memory). Each client loops: pick a prompt
length from the mix, send a streaming /v1/completions request, read it to the end, repeat,
until the time is up (requests still running then are read to their end, so the server is
idle when the figures are taken). Bounded: at most --clients connections and --seconds of
new requests; nothing leaves the machine.

Reports requests/s, output tokens/s, TTFT and inter-token latency percentiles (p50, p90,
p99), errors (HTTP and stream), and the server's RSS before and after the load.

  .venv/bin/python tools/load_test.py --clients 64 --seconds 120 --model DIR -- --threads 2
  .venv/bin/python tools/load_test.py --url http://127.0.0.1:8000 --pid 1234 --clients 512

Needs httpx (installed with the `openai` package of requirements-test.txt).
"""
import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

import httpx


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def start_server(gannet, model, extra):
    proc = subprocess.Popen([gannet, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    while "listening on" not in line:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            sys.exit("the server did not start:\n" + proc.stderr.read())
    return proc, line.strip().split("listening on ")[1]


async def client(http, url, model, args, deadline, stats, rng):
    while time.monotonic() < deadline:
        words = rng.randint(args.prompt_min, args.prompt_max)
        prompt = " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "omega", "sigma")) for _ in range(words))
        body = {"model": model, "prompt": prompt, "max_tokens": rng.randint(args.output_min, args.output_max),
                "temperature": 1.0, "stream": True, "ignore_eos": True}
        if stats.get("requests_out") is not None:  # the same request, as a `bench throughput --dataset` line
            stats["requests_out"].write(json.dumps({k: v for k, v in body.items() if k not in ("model", "stream")}) + "\n")
        t0 = time.monotonic()
        last = None
        tokens = 0
        try:
            async with http.stream("POST", url + "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    stats["errors"].append(f"HTTP {r.status_code}: {r.text[:200]}")
                    continue
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        stats["errors"].append(chunk["error"].get("message", "stream error"))
                        break
                    if not chunk.get("choices"):
                        continue
                    now = time.monotonic()
                    if last is None:
                        stats["ttft"].append(now - t0)
                    else:
                        stats["itl"].append(now - last)
                    last = now
                    tokens += 1
            stats["requests"] += 1
            stats["chunks"] += tokens
            stats["output_tokens"] += body["max_tokens"]  # ignore_eos: exactly max_tokens each
        except (httpx.HTTPError, json.JSONDecodeError) as e:
            stats["errors"].append(f"{type(e).__name__}: {e}")


async def run(args, url, model):
    stats = {"ttft": [], "itl": [], "errors": [], "requests": 0, "chunks": 0, "output_tokens": 0,
             "requests_out": open(args.requests_out, "w") if args.requests_out else None}
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as http:
        if args.api_key:
            http.headers["Authorization"] = "Bearer " + args.api_key
        t0 = time.monotonic()
        deadline = t0 + args.seconds
        await asyncio.gather(*(client(http, url, model, args, deadline, stats, random.Random(args.seed + i))
                               for i in range(args.clients)))
        stats["elapsed"] = time.monotonic() - t0
    if stats["requests_out"]:
        stats["requests_out"].close()
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="checkpoint to serve (the script starts `gannet serve`)")
    ap.add_argument("--url", help="a server already running (loopback), instead of --model")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for its RSS")
    ap.add_argument("--served-model-name", help="with --url: the model's name in the API (default: asked)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--gannet", default=os.path.join(os.path.dirname(__file__), "..", "build", "gannet"))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--prompt-min", type=int, default=8, help="prompt length range, in words")
    ap.add_argument("--prompt-max", type=int, default=256)
    ap.add_argument("--output-min", type=int, default=16, help="max_tokens range")
    ap.add_argument("--output-max", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--requests-out", help="write every request sent as a prompts line (for `gannet bench throughput "
                    "--dataset FILE --max-num-seqs CLIENTS`: the same requests offline)")
    ap.add_argument("server_args", nargs="*", help="after --: flags for `gannet serve`")
    args = ap.parse_args()
    if bool(args.model) == bool(args.url):
        ap.error("give exactly one of --model and --url")
    if not 1 <= args.clients <= 4096 or not 0 < args.seconds <= 3600:
        ap.error("--clients must be in [1, 4096] and --seconds in (0, 3600]")
    proc = None
    if args.model:
        proc, url = start_server(args.gannet, args.model, args.server_args)
        pid = proc.pid
    else:
        url, pid = args.url.rstrip("/"), args.pid
        if not url.startswith(("http://127.", "http://localhost", "http://[::1]")):
            ap.error("--url must be a loopback address")
    try:
        headers = {"Authorization": "Bearer " + args.api_key} if args.api_key else {}
        model = args.served_model_name or httpx.get(url + "/v1/models", headers=headers).json()["data"][0]["id"]
        rss_before = rss_mib(pid) if pid else float("nan")
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        stats = asyncio.run(run(args, url, model))
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        # The client shares the machine with the server: its CPU time says how much it took.
        stats["client_cpu_s"] = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        rss_after = rss_mib(pid) if pid else float("nan")
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=60)
    ms = lambda v: round(v * 1000, 2)
    out = {
        "clients": args.clients, "seconds": round(stats["elapsed"], 1), "requests": stats["requests"],
        "requests_per_s": round(stats["requests"] / stats["elapsed"], 2),
        "output_chunks_per_s": round(stats["chunks"] / stats["elapsed"], 1),
        "output_tokens_per_s": round(stats["output_tokens"] / stats["elapsed"], 1),
        "ttft_ms": {f"p{p}": ms(percentile(stats["ttft"], p)) for p in (50, 90, 99)},
        "itl_ms": {f"p{p}": ms(percentile(stats["itl"], p)) for p in (50, 90, 99)},
        "errors": len(stats["errors"]), "first_errors": stats["errors"][:5],
        "client_cpu_s": round(stats["client_cpu_s"], 1),
        "rss_mib_before": round(rss_before, 1), "rss_mib_after": round(rss_after, 1),
    }
    if stats["itl"]:
        out["itl_ms"]["mean"] = ms(statistics.mean(stats["itl"]))
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 1 if stats["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
