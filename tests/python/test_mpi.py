"""Scale-out through the binary under mpirun (tests/mpirun.sh: loopback TCP, any user,
more ranks than cores): data-parallel generate equals one process line for line, with
and without expert parallelism and EPLB; a failing rank ends the job with an error naming
it; bench throughput reports the job."""
import json
import os
import pathlib
import subprocess
import time

import pytest

from conftest import ROOT, gannet_bin

TINY = ROOT / "tests" / "golden" / "deepseek-v41-tiny"
MPIRUN = os.environ.get("GANNET_MPIRUN_SH", str(ROOT / "tests" / "mpirun.sh"))


def mpirun(np, args, check=True, timeout=240, rc=0):
    p = subprocess.run(["bash", MPIRUN, "-np", str(np), gannet_bin(), *args], capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != rc:
        raise AssertionError(f"mpirun -np {np} gannet {' '.join(args)} exited {p.returncode}, not {rc}:\n{p.stderr}")
    return p


def single(args, rc=0):
    p = subprocess.run([gannet_bin(), *args], capture_output=True, text=True, timeout=240)
    assert p.returncode == rc, p.stderr
    return p


def prompts_file(path, n, vocab, max_tokens=6):
    """n requests of different lengths, greedy and sampled (seeded), one with n = 2."""
    lines = []
    for i in range(n):
        ids = [(17 * i + 31 * k) % (vocab - 2) + 1 for k in range(3 + 5 * i)]
        req = {"prompt_token_ids": ids, "max_tokens": max_tokens, "seed": i}
        req["temperature"] = 0 if i % 2 == 0 else 0.9
        if i == 3:
            req["n"] = 2
        lines.append(json.dumps(req))
    lines.insert(2, '{"prompt_token_ids": "not a list"}')  # a bad line keeps its place
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """DeepSeek-V4.1 tiny with a skewed router: experts 0 and 1 run hot."""
    d = tmp_path_factory.mktemp("v41skew") / "m"
    single(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--router-skew", "3", "--out", str(d)])
    return d


def test_v41_data_and_expert_parallel_equal_one_process(tmp_path):
    """Each rank runs its share of the requests and holds its share of the experts; the
    outputs (sampled ones too) are those of one process, in input order."""
    p = prompts_file(tmp_path / "p.jsonl", 7, 512)
    base = ["generate", "--model", str(TINY), "--prompts", str(p), "--json"]
    ref = single(base + ["--threads", "1"], rc=1).stdout  # 1: the bad line
    assert ref.count("\n") == 8 and '"error"' in ref.splitlines()[2]
    for np, extra in [(2, []), (4, []), (2, ["--async-scheduling", "off"]),
                      (2, ["--ep-redundant-experts", "2", "--eplb-interval", "2"]),
                      (4, ["--ep-redundant-experts", "1", "--eplb-interval", "1", "--eplb-window", "3"]),
                      (3, ["--expert-parallel", "off"])]:
        r = mpirun(np, base + extra, rc=1)
        assert r.stdout == ref, f"-np {np} {extra}"
        if "--expert-parallel" not in extra:
            assert f"expert parallel over {np} ranks" in r.stderr
            assert f"[expert parallel: {np} ranks" in r.stderr
        assert f"{np} ranks]" in r.stderr
    # Speculative decoding: DSpark's drafter (its experts on every rank) and n-gram drafts.
    for spec in (["--speculative", "dspark", "--num-speculative-tokens", "3"], ["--speculative", "ngram"]):
        assert mpirun(2, base + spec, rc=1).stdout == single(base + spec, rc=1).stdout, spec


def test_v4_expert_parallel_equals_one_process(tmp_path):
    """DeepSeek-V4-Flash (hash-routed first layer, ratio-4 and ratio-8 compression): one
    forward per step over every sequence, experts spread over the ranks, EPLB moving them;
    the outputs are one process's."""
    v4 = ROOT / "tests" / "golden" / "deepseek-v4-tiny"
    p = prompts_file(tmp_path / "p.jsonl", 6, 1024)
    base = ["generate", "--model", str(v4), "--prompts", str(p), "--json"]
    ref = single(base + ["--threads", "1"], rc=1).stdout
    for np, extra in [(2, []), (3, ["--ep-redundant-experts", "1", "--eplb-interval", "2"]),
                      (2, ["--speculative", "ngram"])]:
        r = mpirun(np, base + extra, rc=1)
        assert r.stdout == (ref if "--speculative" not in extra else single(base + extra, rc=1).stdout), f"-np {np} {extra}"
        assert f"expert parallel over {np} ranks" in r.stderr


def test_each_rank_maps_only_its_experts():
    r = mpirun(2, ["generate", "--model", str(TINY), "--prompt", "x", "--max-tokens", "1"], check=False)
    # No tokenizer: the prompt must be ids; the failure comes after loading, from rank 0.
    assert r.returncode != 0 and "prompt_token_ids" in r.stderr
    line = next(l for l in r.stderr.splitlines() if "expert parallel over 2 ranks" in l)
    mapped, total = line.split("rank 0 maps ")[1].split(";")[0].split(" of the checkpoint's ")

    def mib(s):
        v, unit = s.split()
        return float(v) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]
    assert mib(mapped) < mib(total)


def test_eplb_evens_the_ranks_under_skew_and_keeps_outputs(tmp_path, skewed):
    p = prompts_file(tmp_path / "p.jsonl", 6, 512, max_tokens=12)
    base = ["generate", "--model", str(skewed), "--prompts", str(p), "--json"]
    ref = single(base, rc=1).stdout

    def balance(stderr):
        line = next(l for l in stderr.splitlines() if l.startswith("[expert parallel:"))
        overall = float(line.split("rank load max/mean ")[1].split()[0])
        recent = float(line.split("(")[1].split()[0])
        rebalances = int(line.split(" rebalances")[0].split()[-1])
        return overall, recent, rebalances

    off = mpirun(2, base, rc=1)
    on = mpirun(2, base + ["--ep-redundant-experts", "2", "--eplb-interval", "2"], rc=1)
    assert off.stdout == ref and on.stdout == ref
    o_all, o_recent, o_n = balance(off.stderr)
    e_all, e_recent, e_n = balance(on.stderr)
    assert o_n == 0 and e_n > 0
    assert o_all > 1.5  # the hot experts start on rank 0
    assert e_recent < 1.25 and e_recent < o_recent


def test_dense_model_data_parallel(tmp_path, tiny_models):
    p = prompts_file(tmp_path / "p.jsonl", 5, 256)
    base = ["generate", "--model", str(tiny_models["llama"]), "--prompts", str(p), "--json"]
    ref = single(base, rc=1).stdout
    r = mpirun(2, base, rc=1)
    assert r.stdout == ref
    assert "expert parallel" not in r.stderr  # a dense model: data parallel only
    r = mpirun(2, base + ["--expert-parallel", "on"], check=False)
    assert r.returncode != 0 and "has no routed experts" in r.stderr


def test_failing_rank_ends_the_job_with_its_error(tmp_path):
    """Rank 1 cannot load its model: the job ends at once, naming rank 1 and the problem,
    and rank 0 does not wait for it."""
    p = prompts_file(tmp_path / "p.jsonl", 3, 512)
    args = ["generate", "--prompts", str(p), "--json", "--mpi-timeout", "60"]
    t0 = time.time()
    r = subprocess.run(["bash", MPIRUN, "-np", "1", gannet_bin(), *args, "--model", str(TINY), ":",
                        "-np", "1", gannet_bin(), *args, "--model", str(tmp_path / "missing")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "gannet generate (rank 1): error:" in r.stderr and "missing: no config.json" in r.stderr
    assert time.time() - t0 < 50


def test_a_rank_that_stops_answering_ends_the_job():
    """Rank 1 hangs; rank 0's collective gives up after the timeout and ends the job."""
    binary = pathlib.Path(os.environ.get("GANNET_BINARY_DIR", ROOT / "build")) / "tests" / "test_mpi_moe"
    t0 = time.time()
    r = subprocess.run(["bash", MPIRUN, "-np", "2", str(binary), "--timeout-case"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "rank 0: an agreement (allreduce) waited more than 2 s for the other ranks" in r.stderr, r.stderr
    assert time.time() - t0 < 40


def test_job_options_are_checked(tmp_path):
    r = mpirun(2, ["generate", "--model", str(TINY), "--prompt", "1", "--dp", "3"], check=False)
    assert r.returncode != 0 and "--dp 3 but this job has 2 ranks" in r.stderr
    r = mpirun(2, ["make-model", "--arch", "llama", "--preset", "tiny", "--out", str(tmp_path / "m")], check=False)
    assert r.returncode != 0 and "runs as one process" in r.stderr
    r = mpirun(2, ["bench", "decode", "--model", str(TINY)], check=False)
    assert r.returncode != 0 and "only bench throughput runs as ranks" in r.stderr
    r = single_fail(["generate", "--model", str(TINY), "--prompt", "1", "--eplb-interval", "4"])
    assert "this run has one rank" in r.stderr
    r = mpirun(2, ["generate", "--model", str(TINY), "--prompt", "1", "--eplb-window", "4"], check=False)
    assert r.returncode != 0 and "--eplb-window needs --eplb-interval" in r.stderr
    r = mpirun(2, ["generate", "--model", str(TINY), "--prompt", "1", "--ep-redundant-experts", "2"], check=False)
    assert r.returncode != 0 and "filled by EPLB's rebalances" in r.stderr
    r = single_fail(["bench", "throughput", "--model", str(TINY), "--dp", "2"])
    assert "--dp 2 but this job has 1 rank" in r.stderr
    r = single_fail(["generate", "--model", str(TINY), "--prompt", "1", "--mpi-timeout", "0"])
    assert "--mpi-timeout expects seconds > 0" in r.stderr
    r = single_fail(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--router-skew", "-1",
                     "--out", str(tmp_path / "s")])
    assert "--router-skew must be in [0, 100]" in r.stderr
    r = single_fail(["make-model", "--arch", "llama", "--preset", "tiny", "--router-skew", "1",
                     "--out", str(tmp_path / "l")])
    assert "--router-skew applies to --arch deepseek_v41" in r.stderr


def single_fail(args):
    p = subprocess.run([gannet_bin(), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    return p


def test_bench_throughput_reports_the_job(tmp_path, skewed):
    out = tmp_path / "b.json"
    r = mpirun(2, ["bench", "throughput", "--model", str(skewed), "--num-prompts", "6", "--input-len", "16",
                   "--output-len", "8", "--ep-redundant-experts", "2", "--eplb-interval", "3", "--json", str(out)])
    rep = json.loads(out.read_text())
    row = rep["rows"][0]
    assert rep["ranks"] == 2 and rep["expert_parallel"] is True
    assert row["requests"] == 6 and row["output_tokens"] == 48
    assert row["ep_rebalances"] >= 1 and row["ep_weight_bytes_moved"] > 0
    assert row["ep_bytes_per_step_per_rank"] > 0 and row["ep_all_to_all_ms_per_layer"] > 0
    assert len(row["ep_rows_computed"]) == 2
    assert "rank load max/mean" in r.stdout


class MpiServer:
    """`mpirun -np N gannet serve` on a free port; rank 0 answers HTTP."""

    def __init__(self, np, model, *extra):
        import openai
        self.proc = subprocess.Popen(["bash", MPIRUN, "-np", str(np), gannet_bin(), "serve", "--model", str(model),
                                      "--port", "0", "--threads", "1", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line, deadline = "", time.time() + 90
        while "listening on" not in line:
            line = self.proc.stdout.readline()
            if not line and (self.proc.poll() is not None or time.time() > deadline):
                raise AssertionError("server did not start: " + self.proc.stderr.read())
        self.url = line.strip().split("listening on ")[1]
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=120)

    def metrics(self):
        import urllib.request
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            return r.read().decode()

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the MPI server did not stop on SIGTERM")


def reference(model, prompt, **params):
    line = json.dumps({"prompt_token_ids" if isinstance(prompt, list) else "prompt": prompt, **params})
    p = subprocess.run([gannet_bin(), "generate", "--model", str(model), "--prompts", "/dev/stdin", "--json"],
                       input=line + "\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("which", ["llama", "v41"])
def test_data_parallel_server_equals_generate(which, tiny_models):
    """Concurrent requests, streamed and not, spread over the ranks (expert parallel for
    DeepSeek-V4.1): each answer equals one process's `generate`."""
    import concurrent.futures
    model = tiny_models["llama"] if which == "llama" else TINY
    name = model.name
    prompts = (["The quick brown fox", "Hello there", "One two three four five six", "Numbers: 1 2 3"]
               if which == "llama" else [[5, 9, 11], [100, 7, 3, 8, 20], [42] * 9, [1, 2, 3, 4, 5, 6, 7]])
    params = [{"max_tokens": 8, "temperature": 0}, {"max_tokens": 7, "temperature": 0.8, "seed": 3},
              {"max_tokens": 6, "temperature": 0}, {"max_tokens": 9, "temperature": 1.0, "top_p": 0.9, "seed": 11}]
    for p in params:
        p["logprobs"] = 0  # the chosen tokens' logprobs: the same bits, and tokens even without text
    s = MpiServer(2, model)
    try:
        def ask(i):
            if i % 2 == 0:
                r = s.client.completions.create(model=name, prompt=prompts[i], **params[i])
                return r.choices[0].text, r.usage.completion_tokens, r.choices[0].logprobs.token_logprobs
            chunks = list(s.client.completions.create(model=name, prompt=prompts[i], stream=True, **params[i]))
            text = "".join(c.choices[0].text for c in chunks if c.choices)
            lps = [x for c in chunks if c.choices and c.choices[0].logprobs for x in c.choices[0].logprobs.token_logprobs]
            return text, None, lps
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(ask, range(4)))
        for i, (text, used, lps) in enumerate(got):
            ref = reference(model, prompts[i], **params[i])
            assert text == ref["text"], (i, text, ref)
            assert lps == [x["logprob"] for x in ref["logprobs"]], i
            if used is not None:
                assert used == len(ref["token_ids"])
        m = s.metrics()
        assert "gannet_requests_total 4" in m
    finally:
        assert s.stop() is not None
