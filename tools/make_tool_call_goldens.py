#!/usr/bin/env python3
"""Tool-call parse cases for the dense families, written by their official chat templates.

For each template in tests/golden/chat_templates/ whose family calls tools (Llama 3.1 / 3.2,
Qwen 2.5 / 3), transformers renders a user turn with the generation prompt,
and the same turn followed by an assistant message with tool calls; the completion is what
the second adds to the first, less the end-of-turn token(s) the engine stops on. gannet's
parser for the family must read back exactly the calls the template wrote. Writes
tests/data/tool_call_parse/<name>.jsonl, one case a line:

    {"id", "template": <name>, "text": <completion>, "content": <text before the calls>,
     "tool_calls": [{"name", "arguments": <object>}]}

Usage (from the repository root, with the venv of tools/requirements-golden.txt):
    .venv-golden/bin/python tools/make_tool_call_goldens.py
"""
from __future__ import annotations

import copy
import json
import pathlib

from transformers import PreTrainedTokenizerFast

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "tests" / "golden" / "chat_templates"
OUT = ROOT / "tests" / "data" / "tool_call_parse"
TOKENIZER = ROOT / "assets" / "tokenizers" / "deepseek-v3" / "tokenizer.json"
# The end-of-turn text each family's generation stops on (the engine's EOS; not in the text).
END = {"llama3.1": ["<|eom_id|>", "<|eot_id|>"], "llama3.2": ["<|eom_id|>", "<|eot_id|>"],
       "qwen2.5": ["<|im_end|>\n"], "qwen3": ["<|im_end|>\n"]}
# DeepSeek V3's template renders calls only when an assistant's content is None, and
# transformers drops None keys before rendering, so it cannot write a call: not covered.
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "search_docs", "parameters": {"type": "object", "properties": {
             "query": {"type": "string"}, "filters": {"type": "object"}}}}}]
CALLS = [
    ("one_call", [("get_weather", {"city": "Oslo", "days": 3})]),
    ("nested_unicode", [("search_docs", {"query": "naïve \"quoted\" 東京\nnew line", "filters": {"tags": ["a", "b"],
                                                                                            "since": None, "n": 1.5}})]),
    ("zero_args", [("get_weather", {})]),
    ("two_calls", [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "days": 1})]),
]
# Llama 3.1/3.2's templates take one call per assistant message.
SINGLE = {"llama3.1", "llama3.2"}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    user = [{"role": "user", "content": "What is the weather?"}]
    for name in END:
        spec = json.loads((TEMPLATES / f"{name}.json").read_text(encoding="utf-8"))
        special = {k: spec[k] for k in ("bos_token", "eos_token") if spec.get(k) is not None}
        tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER), **special)
        tok.chat_template = spec["chat_template"]
        lines = []
        for cid, calls in CALLS:
            if name in SINGLE and len(calls) > 1:
                continue
            for content in (None, "Let me check."):
                if content and name in ("llama3.1", "llama3.2"):
                    continue  # these templates drop or refuse content beside calls
                tool_calls = []
                for i, (fn, args) in enumerate(calls):
                    a = copy.deepcopy(args)
                    tool_calls.append({"id": f"c{i}", "type": "function", "function": {"name": fn, "arguments": a}})
                msg = {"role": "assistant", "content": content, "tool_calls": tool_calls}
                prefix = tok.apply_chat_template(user, tools=TOOLS, add_generation_prompt=True, tokenize=False)
                full = tok.apply_chat_template(user + [msg], tools=TOOLS, add_generation_prompt=False, tokenize=False)
                assert full.startswith(prefix), (name, cid)
                text = full[len(prefix):]
                for end in END[name]:
                    if text.endswith(end):
                        text = text[: -len(end)]
                        break
                else:
                    raise AssertionError(f"{name} {cid}: no end-of-turn token at the end of {text!r}")
                lines.append(json.dumps({"id": f"{name}-{cid}" + ("-content" if content else ""), "template": name,
                                         "text": text, "content": content or "",
                                         "tool_calls": [{"name": fn, "arguments": args} for fn, args in calls]},
                                        ensure_ascii=False))
        (OUT / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{name}: {len(lines)} cases")


if __name__ == "__main__":
    main()
