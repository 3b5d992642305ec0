"""`gannet bench agent` on a tiny DeepSeek-V4.1 checkpoint (random weights, DeepSeek's own
chat encoder): conversations of tool calls and tool results through the in-process
OpenAI server. Checked: a tool call every turn (tool_choice "required"), prompts that
grow by the re-rendered call and result, a history that stays cached (what each turn
recomputes does not grow with the conversation, and is the whole prompt without
caching), and the shared system prompt computed once by conversations that start
together (prefix-aware admission), and later turns that restore state snapshots instead
of replaying. Timings are only checked to exist."""
import json
import os
import subprocess

from conftest import gannet_bin
from test_server_tools import v41  # noqa: F401 (fixture)


def agent(tmp_path, model, *extra):
    out = tmp_path / "agent.json"
    env = dict(os.environ, GANNET_ROOFLINE_CACHE=str(tmp_path / "roofline.json"))
    p = subprocess.run([gannet_bin(), "bench", "agent", "--model", str(model), "--threads", "2", "--conversations", "2",
                        "--turns", "3", "--system-len", "300", "--tool-result-len", "60",
                        "--json", str(out), *extra], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


def test_agent_history_stays_cached(v41, tmp_path):  # noqa: F811
    j = agent(tmp_path, v41)
    assert j["bench"] == "agent" and j["conversations"] == 2 and j["turns"] == 3
    rows = j["rows"]
    assert [r["turn"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["tool_calls"] == 2 and r["whole_tool_calls"] == 2, r
        assert r["ttft_ms_p50"] > 0 and r["latency_ms_p50"] >= r["ttft_ms_p50"]
        assert abs(r["prompt_tokens_mean"] - r["cached_tokens_mean"] - r["recomputed_tokens_mean"]) < 1e-9
    grow = [b["prompt_tokens_mean"] - a["prompt_tokens_mean"] for a, b in zip(rows, rows[1:])]
    assert all(g > 60 for g in grow), grow  # the call and the tool result come back each turn
    # Started together, the two conversations compute the system prompt once.
    assert rows[0]["cached_tokens_mean"] > 0
    # Later turns recompute about what they add (plus the model's bounded replay), not the
    # history: the same amount on turn 3 as on turn 2, well under the prompt.
    for r in rows[1:]:
        assert r["recomputed_tokens_mean"] < r["prompt_tokens_mean"] / 2, r
    assert rows[2]["recomputed_tokens_mean"] <= rows[1]["recomputed_tokens_mean"] * 1.25 + 16
    assert j["hit_rate_from_turn_2"] > 0.5

    # Later turns restore the state snapshot of the previous turn's prompt instead of
    # replaying cached positions; without snapshots the same turns replay, and recompute more.
    assert j["prefix_cache_snapshot_restores_total"] >= 2, j
    nosnap = agent(tmp_path, v41, "--prefix-state-snapshots", "0")
    assert nosnap["prefix_cache_snapshot_restores_total"] == 0
    assert nosnap["prefix_cache_replayed_total"] > j["prefix_cache_replayed_total"]
    for t, (a, b) in enumerate(zip(rows, nosnap["rows"])):
        assert b["prompt_tokens_mean"] == a["prompt_tokens_mean"]
        if t > 0:
            assert b["recomputed_tokens_mean"] > a["recomputed_tokens_mean"], (a, b)

    off = agent(tmp_path, v41, "--no-prefix-caching")
    assert off["prefix_caching"] is False
    for a, b in zip(rows, off["rows"]):
        # Greedy and batch-invariant: the same conversations, now computed in full.
        assert b["prompt_tokens_mean"] == a["prompt_tokens_mean"]
        assert b["hit_rate"] == 0 and b["recomputed_tokens_mean"] == b["prompt_tokens_mean"]


def test_agent_flags_are_checked(v41, tmp_path):  # noqa: F811
    env = dict(os.environ, GANNET_ROOFLINE_CACHE=str(tmp_path / "roofline.json"))
    for args, needle in [(["--conversations", "0"], "--conversations"),
                         (["--shared-prefix-len", "8"], "--shared-prefix-len applies to bench throughput only")]:
        p = subprocess.run([gannet_bin(), "bench", "agent", "--model", str(v41), *args], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode != 0 and needle in p.stderr, p.stderr
    p = subprocess.run([gannet_bin(), "bench", "decode", "--model", str(v41), "--conversations", "2"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0 and "--conversations applies to bench agent only" in p.stderr, p.stderr
