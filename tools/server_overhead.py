#!/usr/bin/env python3
"""Server overhead per request for a 1-token completion, loopback only.

Starts `gannet serve` on a free loopback port (flags after `--`), sends --requests
sequential non-streaming /v1/completions with max_tokens 1 over one kept-alive connection,
and sets the client's mean latency beside the engine's own time for the same requests
(the server's gannet_time_to_first_token_seconds histogram: from the moment the HTTP thread
hands the request to the engine loop until its token exists, so it holds tokenization,
scheduling and the model step). What is left is the server's overhead: HTTP, JSON parsing
and validation, queue hand-offs, building and sending the response.

  .venv/bin/python tools/server_overhead.py --model DIR --requests 200 -- --threads 2
"""
import argparse
import json
import os
import statistics
import time

import httpx

from load_test import start_server


def ttft_totals(http, url):
    total = count = 0.0
    for line in http.get(url + "/metrics").text.splitlines():
        if line.startswith("gannet_time_to_first_token_seconds_sum "):
            total = float(line.split()[1])
        elif line.startswith("gannet_time_to_first_token_seconds_count "):
            count = float(line.split()[1])
    return total, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--gannet", default=os.path.join(os.path.dirname(__file__), "..", "build", "gannet"))
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("server_args", nargs="*", help="after --: flags for `gannet serve`")
    args = ap.parse_args()
    if not 1 <= args.requests <= 100000:
        ap.error("--requests must be in [1, 100000]")
    proc, url = start_server(args.gannet, args.model, args.server_args)
    try:
        with httpx.Client(timeout=120) as http:
            model = http.get(url + "/v1/models").json()["data"][0]["id"]
            body = {"model": model, "prompt": args.prompt, "max_tokens": 1, "temperature": 0}
            for _ in range(5):  # warm-up: first-touch of caches and pages
                http.post(url + "/v1/completions", json=body).raise_for_status()
            sum0, n0 = ttft_totals(http, url)
            lat = []
            for _ in range(args.requests):
                t0 = time.perf_counter()
                r = http.post(url + "/v1/completions", json=body)
                lat.append(time.perf_counter() - t0)
                r.raise_for_status()
            sum1, n1 = ttft_totals(http, url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    engine_ms = (sum1 - sum0) / max(n1 - n0, 1) * 1e3
    out = {
        "requests": args.requests,
        "client_latency_ms": {"mean": round(statistics.mean(lat) * 1e3, 3),
                              "p50": round(statistics.median(lat) * 1e3, 3)},
        "engine_ms_mean": round(engine_ms, 3),
        "server_overhead_ms_mean": round(statistics.mean(lat) * 1e3 - engine_ms, 3),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
