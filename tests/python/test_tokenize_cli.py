"""`gannet tokenize` end to end: JSON lines in, ids (or text) out, errors per line."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "data" / "deepseek-v3-reference-encodings.jsonl"
TOKENIZER_DIR = ROOT / "assets" / "tokenizers" / "deepseek-v3"


def gannet_bin():
    path = os.environ.get("GANNET_BIN") or str(ROOT / "build" / "gannet")
    if not Path(path).exists():
        pytest.skip(f"gannet binary not found at {path} (set GANNET_BIN)")
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("deepseek-v3")
    for f in TOKENIZER_DIR.glob("tokenizer*.json"):
        shutil.copy(f, d / f.name)
    return d


def references():
    with open(REFERENCE, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run(model_dir, lines, *flags):
    proc = subprocess.run(
        [gannet_bin(), "tokenize", "--model", str(model_dir), *flags],
        input="".join(line + "\n" for line in lines).encode(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    # Split on "\n" only: decoded text may hold U+2028 and friends, which splitlines() splits on.
    out = proc.stdout.decode().split("\n")
    assert out[-1] == ""
    return [json.loads(line) for line in out[:-1]]


def test_encode_matches_reference_ids(model_dir):
    refs = references()
    picked = refs[:12] + refs[-3:]
    out = run(model_dir, [json.dumps({"text": r["text"]}, ensure_ascii=False) for r in picked])
    assert [o["ids"] for o in out] == [r["ids"] for r in picked]


def test_decode_round_trips(model_dir):
    refs = [r for r in references()[:20] if r["decoded_equals_text"]]
    out = run(model_dir, [json.dumps({"ids": r["ids"]}) for r in refs], "--decode")
    assert [o["text"] for o in out] == [r["text"] for r in refs]


def test_bad_lines_get_errors_and_the_rest_go_on(model_dir):
    lines = [
        json.dumps({"text": "Hello, world!"}),
        "this is not json",
        json.dumps({"txt": "wrong key"}),
        json.dumps({"text": 42}),
        "",  # blank lines are skipped
        json.dumps({"text": "<｜User｜>hi<｜Assistant｜>"}, ensure_ascii=False),
    ]
    out = run(model_dir, lines)
    assert len(out) == 5
    assert out[0] == {"ids": [19923, 14, 2058, 3]}
    assert out[1]["error"].startswith("line 2: invalid JSON")
    assert "line 3" in out[2]["error"] and '"text"' in out[2]["error"]
    assert "line 4" in out[3]["error"]
    assert out[4] == {"ids": [128803, 6366, 128804]}


def test_decode_rejects_bad_ids_per_line(model_dir):
    out = run(model_dir, ['{"ids": [19923, 14]}', '{"ids": [-1]}', '{"ids": [999999999]}', '{"ids": "x"}',
                          '{"ids": [2058, 3]}'], "--decode")
    assert out[0] == {"text": "Hello,"}
    assert "out of range" in out[1]["error"] or "expected integers" in out[1]["error"]
    assert "999999999" in out[2]["error"]
    assert "ids" in out[3]["error"]
    assert out[4] == {"text": " world!"}


def test_add_special_tokens_prepends_bos(model_dir):
    out = run(model_dir, [json.dumps({"text": "Hello, world!"})], "--add-special-tokens")
    assert out == [{"ids": [0, 19923, 14, 2058, 3]}]


def test_help_and_usage_errors(model_dir):
    proc = subprocess.run([gannet_bin(), "tokenize", "--help"], capture_output=True, timeout=30)
    assert proc.returncode == 0
    assert b"usage: gannet tokenize" in proc.stdout
    proc = subprocess.run([gannet_bin(), "tokenize"], capture_output=True, timeout=30, input=b"")
    assert proc.returncode == 2
    assert b"--model" in proc.stderr
    proc = subprocess.run([gannet_bin(), "tokenize", "--model", str(model_dir / "missing")],
                          capture_output=True, timeout=30, input=b"")
    assert proc.returncode == 1
    assert b"missing" in proc.stderr
