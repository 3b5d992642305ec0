"""`gannet chat-format`: DeepSeek-V4 / V4.1 checkpoints render conversations and parse
completions exactly as DeepSeek's own encoders do (tests/data/deepseek_v4_chat/), dense
models render with their Jinja template as transformers does, and bad lines get an error
line without stopping the rest."""
import json
import pathlib

import pytest

from conftest import ROOT

DATA = ROOT / "tests" / "data" / "deepseek_v4_chat"
MODELS = {"v4": ROOT / "tests" / "golden" / "deepseek-v4-tiny", "v41": ROOT / "tests" / "golden" / "deepseek-v41-tiny"}


def lines(path):
    return [json.loads(l) for l in pathlib.Path(path).read_text(encoding="utf-8").splitlines() if l.strip()]


def chat_format(gannet, tmp_path, model, mode, rows, extra=()):
    src = tmp_path / f"{mode}.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    p = gannet(["chat-format", "--model", str(model), mode, "--input", str(src), *extra], check=False)
    assert p.returncode in (0, 1), p.stderr
    out = [json.loads(l) for l in p.stdout.split("\n") if l]
    assert len(out) == len(rows)
    return p.returncode, out


@pytest.mark.parametrize("version", ["v4", "v41"])
def test_renders_as_deepseeks_encoder(gannet, tmp_path, version):
    golden = lines(DATA / f"{version}.jsonl")
    rc, out = chat_format(gannet, tmp_path, MODELS[version], "render",
                          [{"messages": g["messages"], "kwargs": g["kwargs"]} for g in golden])
    assert rc == 1  # some lines are refusals
    for g, o in zip(golden, out):
        if "error" in g:
            assert "error" in o, (g["id"], o)
        else:
            assert o.get("rendered") == g["rendered"], g["id"]
            assert o["token_ids"] is None  # the tiny checkpoints carry no tokenizer


def test_parses_as_deepseeks_parser(gannet, tmp_path):
    golden = lines(DATA / "dsml_parse.jsonl")
    for version in ("v4", "v41"):
        cases = [g for g in golden if g["version"] == version]
        _, out = chat_format(gannet, tmp_path, MODELS[version], "parse",
                             [{"text": g["text"], "thinking_mode": g["thinking_mode"]} for g in cases])
        for g, o in zip(cases, out):
            if "error" in g:
                assert "error" in o, (g["id"], o)
                continue
            assert (o["content"], o["reasoning_content"]) == (g["content"], g["reasoning_content"]), g["id"]
            assert [c["name"] for c in o["tool_calls"]] == [c["name"] for c in g["tool_calls"]], g["id"]
            for c, w in zip(o["tool_calls"], g["tool_calls"]):
                assert c["arguments"] == w["arguments_raw"] and json.loads(c["arguments"]) == w["arguments"], g["id"]


def test_dense_models_render_with_their_template(gannet, tiny_models, tmp_path):
    # The tiny checkpoints carry DeepSeek-V3's tokenizer and template; transformers'
    # renderings of it are in tests/golden/chat_templates/.
    golden = [g for g in lines(ROOT / "tests" / "golden" / "chat_templates" / "deepseek-v3.jsonl") if "rendered" in g]
    rows = [{"messages": g["messages"], "kwargs": {**g["kwargs"], "add_generation_prompt": g["add_generation_prompt"]}}
            for g in golden]
    rc, out = chat_format(gannet, tmp_path, tiny_models["qwen3"], "render", rows)
    assert rc == 0
    tok = gannet(["tokenize", "--model", str(tiny_models["qwen3"])],
                 input="".join(json.dumps({"text": o["rendered"]}) + "\n" for o in out))
    for g, o, t in zip(golden, out, [l for l in tok.stdout.split("\n") if l]):
        assert o["rendered"] == g["rendered"], g["id"]
        assert o["token_ids"] == json.loads(t)["ids"], g["id"]


def test_bad_lines_and_flags(gannet, tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}], "kwargs": {"thinking_mode": "fast"}},
            {"messages": [{"role": "user", "content": "hi"}], "kwargs": {"temperature": 1}},
            {"messages": [{"role": "user", "content": "hi"}], "extra": 1},
            {"messages": [{"role": "user", "content": "hi"}]}]
    rc, out = chat_format(gannet, tmp_path, MODELS["v41"], "render", rows)
    assert rc == 1
    assert "thinking_mode" in out[0]["error"] and "temperature" in out[1]["error"] and "extra" in out[2]["error"]
    assert out[3]["rendered"] == "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>"
    _, out = chat_format(gannet, tmp_path, MODELS["v41"], "parse", [{"text": "x", "thinking_mode": "deep"}, {"text": "a<｜end▁of▁sentence｜>"}])
    assert "thinking_mode" in out[0]["error"] and out[1]["content"] == "a"
    p = gannet(["chat-format", "--model", str(MODELS["v41"])], check=False)
    assert p.returncode == 2 and "render or parse" in p.stderr
    p = gannet(["chat-format", "--model", str(MODELS["v41"]), "render", "--input", str(tmp_path / "none.jsonl")], check=False)
    assert p.returncode == 2 and "none.jsonl" in p.stderr


@pytest.mark.parametrize("name", ["llama3.1", "llama3.2", "qwen2.5", "qwen3"])
def test_dense_families_parse_what_their_templates_write(gannet, tiny_models, tmp_path, name):
    # tests/data/tool_call_parse/: calls the official templates wrote (tools/make_tool_call_goldens.py).
    template = tmp_path / f"{name}.jinja"
    template.write_text(json.loads((ROOT / "tests" / "golden" / "chat_templates" / f"{name}.json").read_text())["chat_template"])
    golden = lines(ROOT / "tests" / "data" / "tool_call_parse" / f"{name}.jsonl")
    rc, out = chat_format(gannet, tmp_path, tiny_models["qwen3"], "parse", [{"text": g["text"]} for g in golden],
                          ["--chat-template", str(template)])
    assert rc == 0
    for g, o in zip(golden, out):
        assert o["content"] == g["content"] and o["reasoning_content"] == "", g["id"]
        assert [(c["name"], json.loads(c["arguments"])) for c in o["tool_calls"]] == \
               [(c["name"], c["arguments"]) for c in g["tool_calls"]], g["id"]
