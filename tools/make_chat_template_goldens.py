#!/usr/bin/env python3
"""Golden renderings of real chat templates, made by Hugging Face transformers.

For every template file tests/golden/chat_templates/<name>.json (fields: source, licence,
bos_token, eos_token, chat_template) this writes tests/golden/chat_templates/<name>.jsonl:
one JSON object per line and per conversation,

    {"id": ..., "messages": [...], "add_generation_prompt": bool, "kwargs": {...},
     "tools": [...]              (only when tools were passed),
     "rendered": "..."           (the exact string apply_chat_template(tokenize=False) returned)
  or "error": true, "error_type": ..., "error_message": ...   (the template refused the input),
     "rendered_keep_none"/"error_keep_none"   (see below)}

The rendering is transformers' own: a tokenizer is built from the DeepSeek-V3 tokenizer.json in
assets/ (its vocabulary plays no part when tokenize=False), its bos/eos tokens and chat template
are set from the template file, and apply_chat_template renders with transformers' Jinja
environment (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, its own tojson,
raise_exception, strftime_now, namespace).

Before rendering, transformers drops every top-level message key whose value is None, and copies
a message's reasoning given as "thinking" or "reasoning" into "reasoning_content" (and into
"thinking"). gannet must do the same to match. Where a conversation holds such a None, the line also
holds what the same environment renders when the None is kept ("rendered_keep_none", or
"error_keep_none": true), so a template's branch for a None content can still be checked.

Messages, tools and kwargs are written exactly as they were passed, with their key order kept
(tojson prints dict keys in insertion order, so the order is part of the reference).

Usage (from the repository root, with the venv of tools/requirements-golden.txt; no torch needed):
    .venv-golden/bin/python tools/make_chat_template_goldens.py [NAME ...]
"""

from __future__ import annotations

import copy
import json
import pathlib
import sys

import jinja2
import transformers
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "golden" / "chat_templates"
NAMES = ["llama3", "llama3.1", "llama3.2", "qwen2.5", "qwen3", "deepseek-v3"]
MIN_CASES = 24
MAX_FILE_BYTES = 100_000

# The date Llama 3.1/3.2 print as "Today Date". Llama 3.2 would otherwise ask strftime_now for
# today's date, so every Llama 3.2 conversation passes one explicitly.
DATE = "01 Dec 2026"


def tokenizer_json_path() -> pathlib.Path:
    """The repository's DeepSeek-V3 tokenizer.json."""
    path = ROOT / "assets" / "tokenizers" / "deepseek-v3" / "tokenizer.json"
    if path.is_file():
        return path
    sys.exit("no DeepSeek-V3 tokenizer.json found (assets/tokenizers/deepseek-v3/)")


# ---------------------------------------------------------------------------------------------
# Building blocks for the conversations
# ---------------------------------------------------------------------------------------------

def user(content):
    return {"role": "user", "content": content}


def assistant(content, **extra):
    return {"role": "assistant", "content": content, **extra}


def system(content):
    return {"role": "system", "content": content}


def tool_msg(content, **extra):
    return {"role": "tool", "content": content, **extra}


def call(name, arguments, call_id=None, wrap=True):
    """An OpenAI-style tool call; wrap=False gives the bare {"name", "arguments"} form."""
    if not wrap:
        return {"name": name, "arguments": arguments}
    out = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        out = {"id": call_id, **out}
    return out


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Uses \"celsius\" unless told otherwise.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich or 東京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.\nReturns a number; see <docs> & 'notes'.",
        "parameters": {
            "type": "object",
            "properties": {
                "expr": {"type": "string"},
                "precision": {"type": "integer", "minimum": 0, "maximum": 10, "default": 2},
                "scale": {"type": "number", "default": 1.5},
                "flags": {"type": "array", "items": {"type": "boolean"}},
                "options": {"type": "object", "properties": {}},
                "tags": {"type": "array", "items": {"type": "string"}, "default": []},
                "nullable": {"type": ["string", "null"], "default": None},
            },
            "required": ["expr"],
        },
    },
}

TOOLS = [WEATHER_TOOL, CALC_TOOL]

WEATHER_ARGS = {"city": "Zürich", "unit": "celsius"}

# Arguments that exercise tojson: Python float repr, ints, booleans, null, nesting, empty
# containers, and every kind of character json.dumps escapes (or, with ensure_ascii=False, doesn't).
TRICKY_ARGS = {
    "expr": "2*(3+4)",
    "precision": 3,
    "scale": 0.1,
    "ratio": 2.0,
    "big": 1e20,
    "tiny": 1e-07,
    "third": 1 / 3,
    "negative": -42,
    "huge_int": 12345678901234567890,
    "flags": [True, False],
    "nothing": None,
    "nested": {"empty_list": [], "empty_dict": {}, "list": [1, [2, [3]]]},
    "text": "quote \" backslash \\ slash / tab \t newline \n cr \r ctrl \u0001\u001f del \u007f "
            "é 中 😀 \u2028 <tag> & 'apostrophe'",
}

UNICODE_TEXT = ("你好，世界！こんにちは 안녕하세요 — café naïve Ångström Æøå ß "
                "👋🏽 👨‍👩‍👧 🇨🇭 עברית العربية e\u0301 \u00a0nbsp \u200bzwsp")
QUOTES_TEXT = ("He said \"hi\" & 'bye' <b>bold</b> C:\\path\\to\\file \\n (a literal backslash-n) "
               "{\"json\": true} `code` ~tilde~ 100% $HOME #hash")
JINJA_LIKE_TEXT = ("{{ messages }} {% if true %}x{% endif %} {# not a comment #} "
                   "<|im_end|> <|eot_id|> <｜end▁of▁sentence｜> </think> <tool_call>")


def case(case_id, messages, add_generation_prompt=False, kwargs=None, tools=None):
    return {"id": case_id, "messages": messages, "add_generation_prompt": add_generation_prompt,
            "kwargs": kwargs or {}, "tools": tools}


def common_cases(kwargs=None):
    """Conversations every template gets: roles, turns, and awkward strings."""
    kw = kwargs or {}
    return [
        case("single_user_gen", [user("Hello!")], True, kw),
        case("single_user_nogen", [user("Hello!")], False, kw),
        case("system_user_gen", [system("You are a terse assistant."), user("What is 2+2?")], True, kw),
        case("multi_turn_gen", [user("Hi"), assistant("Hello! How can I help?"), user("Tell me a joke.")],
             True, kw),
        case("multi_turn_nogen", [system("Be kind."), user("Hi"), assistant("Hello!"),
                                  user("Bye"), assistant("Goodbye!")], False, kw),
        case("ends_with_assistant_gen", [user("Hi"), assistant("Hello!")], True, kw),
        case("two_system_messages", [system("First system message."), system("Second system message."),
                                     user("Which system message wins?")], True, kw),
        case("system_in_middle", [user("Hi"), assistant("Hello!"), system("Switch to French."),
                                  user("How are you?")], True, kw),
        case("empty_system_and_user", [system(""), user("")], True, kw),
        case("empty_assistant", [user("Say nothing."), assistant(""), user("Thanks.")], False, kw),
        case("unicode", [system("Réponds en français. 日本語も可。"), user(UNICODE_TEXT),
                         assistant("👍 " + UNICODE_TEXT)], True, kw),
        case("quotes_backslashes", [user(QUOTES_TEXT), assistant(QUOTES_TEXT)], False, kw),
        case("surrounding_whitespace", [system("  \n  padded system \t\n"),
                                        user("   \n\t leading and trailing whitespace \t\n  "),
                                        assistant("\n\nanswer with blank lines around\n\n")], True, kw),
        # Python's str.strip() (Jinja's trim) also strips Unicode whitespace such as U+3000 and U+00A0,
        # but not U+200B (zero width space).
        case("unicode_whitespace_edges", [user("\u3000\u00a0\u2003 全角 space \u2028\u0085\u3000"),
                                          assistant("\u200b kept zwsp \u200b")], False, kw),
        case("newlines_inside", [user("line1\nline2\r\nline3\n\n\nline6\n"),
                                 assistant("a\n\nb\n")], False, kw),
        case("template_syntax_in_content", [user(JINJA_LIKE_TEXT), assistant(JINJA_LIKE_TEXT)], True, kw),
        case("long_conversation", [system("You count."), user("1"), assistant("2"), user("3"),
                                   assistant("4"), user("5"), assistant("6"), user("7")], True, kw),
    ]


def llama3_cases():
    return common_cases() + [
        case("whitespace_only_user", [user("   \n\t ")], True),
        case("newline_only_assistant", [user("?"), assistant("\n")], False),
        case("assistant_first", [assistant("I speak first."), user("OK.")], True),
        case("custom_role", [system("sys"), {"role": "narrator", "content": "Once upon a time"},
                             user("Go on")], True),
        case("tool_role_message", [user("Weather in Bern?"), assistant("Let me check."),
                                   tool_msg("{\"temp\": 21}")], True),
        case("ipython_role_message", [user("Run it"), {"role": "ipython", "content": "42"}], True),
        case("assistant_tool_calls_content_none",
             [user("Weather in Zürich?"), assistant(None, tool_calls=[call("get_weather", WEATHER_ARGS)])],
             False),
        case("unused_kwarg", [user("Hi")], True, {"enable_thinking": False, "date_string": DATE}),
    ]


def llama31_cases(version):
    """Llama 3.1 and 3.2 templates (3.2 lacks builtin_tools and asks strftime_now for the date)."""
    kw = {"date_string": DATE}
    out = common_cases(kw) + [
        case("tools_in_user_message", [user("What's the weather in Zürich?")], True, kw, TOOLS),
        case("tools_in_system", [system("You may call tools."), user("What's 6*7?")], True,
             {**kw, "tools_in_user_message": False}, TOOLS),
        case("tools_first_user_trimmed", [system("  sys  "), user("  \n  padded question  \n")], True, kw,
             [WEATHER_TOOL]),
        case("empty_tools_list", [user("No tools really.")], True, kw, []),
        case("custom_tools_kwarg", [user("Weather?")], True, {**kw, "custom_tools": [WEATHER_TOOL]}),
        case("tool_call_and_string_result",
             [user("Weather in Zürich?"),
              assistant(None, tool_calls=[call("get_weather", WEATHER_ARGS, "call_1")]),
              tool_msg("Sunny, 21 °C, \"light\" wind", tool_call_id="call_1")],
             True, kw, TOOLS),
        case("tool_result_dict_and_list",
             [user("Calc please"), assistant("", tool_calls=[call("calc", {"expr": "6*7"})]),
              tool_msg({"result": 42, "exact": True, "note": "ça va"}),
              tool_msg([1, 2.5, "three"])],
             False, kw, TOOLS),
        case("tool_call_tricky_arguments",
             [user("Compute"), assistant(None, tool_calls=[call("calc", TRICKY_ARGS)])], False, kw, TOOLS),
        case("ipython_role_message", [user("Run it"), {"role": "ipython", "content": "42\n"}], True, kw),
        case("error_tools_without_user_message", [system("Only a system message.")], True, kw, TOOLS),
        case("error_two_tool_calls",
             [user("Both cities"), assistant(None, tool_calls=[call("get_weather", {"city": "Bern"}),
                                                               call("get_weather", {"city": "Genf"})])],
             False, kw, TOOLS),
    ]
    if version == "3.1":
        builtin = {**kw, "builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}
        out += [
            case("builtin_tools_gen", [system("Search when needed."), user("Who won in 2024?")], True, builtin),
            case("builtin_tool_call",
                 [user("Search the news"),
                  assistant(None, tool_calls=[call("brave_search", {"query": "news \"today\"", "lang": "en"})]),
                  {"role": "ipython", "content": "results…"}],
                 True, builtin),
            case("builtin_tools_custom_call",
                 [user("Weather?"), assistant(None, tool_calls=[call("get_weather", WEATHER_ARGS)])],
                 False, builtin, [WEATHER_TOOL]),
            # The 3.1 template falls back to a fixed date of its own when none is passed.
            case("default_date_string", [user("What day is it?")], True, {}),
        ]
    return out


def qwen25_cases():
    return common_cases() + [
        case("tools_default_system", [user("Weather in Zürich?")], True, {}, TOOLS),
        case("tools_with_system", [system("You are a weather bot."), user("Weather in 東京?")], True, {},
             TOOLS),
        case("tool_call_empty_content_and_result",
             [user("Weather in Zürich?"), assistant("", tool_calls=[call("get_weather", WEATHER_ARGS, "c1")]),
              tool_msg("{\"temp\": 21, \"sky\": \"clear\"}")], True, {}, TOOLS),
        case("parallel_calls_and_results",
             [system("sys"), user("Bern and Genf?"),
              assistant("Checking both.", tool_calls=[call("get_weather", {"city": "Bern"}),
                                                      call("get_weather", {"city": "Genf"})]),
              tool_msg("Bern: 18"), tool_msg("Genf: 20"), assistant("Bern 18, Genf 20.")], False, {}, TOOLS),
        case("tool_call_content_none",
             [user("Weather?"), assistant(None, tool_calls=[call("get_weather", WEATHER_ARGS)])], False, {},
             TOOLS),
        case("bare_tool_call_form",
             [user("Weather?"), assistant("", tool_calls=[call("get_weather", WEATHER_ARGS, wrap=False)])],
             False),
        case("arguments_as_json_string",
             [user("Weather?"),
              assistant("", tool_calls=[call("get_weather", "{\"city\": \"Zürich\"}")])], False),
        case("tool_call_tricky_arguments",
             [user("Compute"), assistant("", tool_calls=[call("calc", TRICKY_ARGS)])], False, {}, TOOLS),
        case("tool_message_first", [tool_msg("orphan result"), user("What was that?")], True),
    ]


def qwen3_cases():
    think = "<think>\nThe user greets me.\n</think>\n\nHello there!"
    return common_cases() + [
        case("enable_thinking_false_gen", [user("Hi")], True, {"enable_thinking": False}),
        case("enable_thinking_true_gen", [user("Hi")], True, {"enable_thinking": True}),
        case("enable_thinking_false_multi_turn", [user("Hi"), assistant("Hello!"), user("Bye")], True,
             {"enable_thinking": False}),
        case("reasoning_content_last_turn",
             [user("2+2?"), assistant("4", reasoning_content="\nSimple addition.\n")], False),
        case("reasoning_content_earlier_turn",
             [user("2+2?"), assistant("4", reasoning_content="Simple addition."), user("3+3?")], True),
        case("think_tags_in_content_last", [user("Hi"), assistant(think)], False),
        case("think_tags_in_content_earlier", [user("Hi"), assistant(think), user("Again")], True),
        case("only_closing_think_tag", [user("Hi"), assistant("reasoning without an opening tag\n</think>\nAnswer")],
             False),
        case("empty_reasoning_content", [user("Hi"), assistant("Hey", reasoning_content="")], False),
        case("reasoning_alias_field", [user("Hi"), assistant("Hey", reasoning="Thought given as 'reasoning'.")],
             False),
        case("multi_step_tool_use",
             [user("Weather in Zürich?"),
              assistant(None, reasoning_content="I should call the tool.",
                        tool_calls=[call("get_weather", WEATHER_ARGS, "c1")]),
              tool_msg("Sunny, 21 °C"),
              assistant("It is sunny and 21 °C.", reasoning_content="The tool answered.")],
             False, {}, TOOLS),
        case("tool_result_then_gen",
             [system("Use tools."), user("Bern and Genf?"),
              assistant("", tool_calls=[call("get_weather", {"city": "Bern"}),
                                        call("get_weather", "{\"city\": \"Genf\"}")]),
              tool_msg("Bern: 18"), tool_msg("Genf: 20")],
             True, {"enable_thinking": False}, TOOLS),
        case("user_content_looks_like_tool_response",
             [user("Question"), assistant("Answer", reasoning_content="r1"),
              user("<tool_response>\nfake\n</tool_response>"), assistant("Final", reasoning_content="r2")],
             False),
        case("tools_no_system", [user("Weather?")], True, {}, TOOLS),
        case("tool_call_tricky_arguments",
             [user("Compute"), assistant("Computing.", tool_calls=[call("calc", TRICKY_ARGS, wrap=False)])],
             False, {}, TOOLS),
        case("non_string_content",
             [user([{"type": "text", "text": "parts are not strings"}]), assistant("ok")], True),
    ]


def deepseek_v3_cases():
    call_str = call("get_weather", "{\"city\": \"Zürich\", \"unit\": \"celsius\"}", "c1")
    return common_cases() + [
        case("tool_call_content_none",
             [user("Weather in Zürich?"), assistant(None, tool_calls=[call_str])], False),
        case("two_tool_calls_content_none",
             [user("Bern and Genf?"),
              assistant(None, tool_calls=[call("get_weather", "{\"city\": \"Bern\"}"),
                                          call("get_weather", "{\"city\": \"Genf\"}")]),
              tool_msg("Bern: 18"), tool_msg("Genf: 20"), assistant("Bern 18, Genf 20.")], False),
        case("tool_result_then_gen",
             [user("Weather?"), assistant(None, tool_calls=[call_str]), tool_msg("Sunny")], True),
        case("tool_call_empty_content", [user("Weather?"), assistant("", tool_calls=[call_str])], False),
        case("tool_outputs_then_user",
             [system("sys"), user("Weather?"), assistant(None, tool_calls=[call_str]),
              tool_msg("Sunny, 21 °C"), user("And tomorrow?")], True),
        case("three_system_messages_scattered",
             [system("A"), user("u1"), system("B"), assistant("a1"), system("C"), user("u2")], True),
        case("assistant_first", [assistant("I speak first."), user("OK.")], True),
        case("error_arguments_as_dict",
             [user("Weather?"), assistant(None, tool_calls=[call("get_weather", WEATHER_ARGS)])], False),
    ]


CASES = {
    "llama3": llama3_cases,
    "llama3.1": lambda: llama31_cases("3.1"),
    "llama3.2": lambda: llama31_cases("3.2"),
    "qwen2.5": qwen25_cases,
    "qwen3": qwen3_cases,
    "deepseek-v3": deepseek_v3_cases,
}


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def has_top_level_none(messages) -> bool:
    return any(value is None for message in messages for value in message.values())


def render(fn):
    """Run fn; return ("rendered", text) or ("error", (exception type name, message))."""
    try:
        return "rendered", fn()
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
        return "error", (type(exc).__name__, str(exc))


def to_json_line(record) -> str:
    """One JSON line, UTF-8 kept readable, but with the characters that some readers take for line
    breaks (U+0085, U+2028, U+2029) escaped. They can only occur inside JSON strings, so a plain
    text replacement is exact."""
    line = json.dumps(record, ensure_ascii=False)
    for ch in ("\u0085", "\u2028", "\u2029"):
        line = line.replace(ch, "\\u%04x" % ord(ch))
    return line


def make_golden(name: str, tok_path: pathlib.Path) -> int:
    spec = json.loads((GOLDEN_DIR / f"{name}.json").read_text(encoding="utf-8"))
    special = {key: spec[key] for key in ("bos_token", "eos_token") if spec.get(key) is not None}
    tok = PreTrainedTokenizerFast(tokenizer_file=str(tok_path), **special)
    tok.chat_template = spec["chat_template"]

    lines = []
    for c in CASES[name]():
        messages, tools, kwargs, agp = c["messages"], c["tools"], c["kwargs"], c["add_generation_prompt"]

        # The public entry point, exactly as a user calls it. Copies keep the recorded inputs pristine.
        kind, value = render(lambda: tok.apply_chat_template(
            copy.deepcopy(messages), tools=copy.deepcopy(tools), add_generation_prompt=agp,
            tokenize=False, **copy.deepcopy(kwargs)))

        record = {"id": c["id"], "messages": messages, "add_generation_prompt": agp, "kwargs": kwargs}
        if tools is not None:
            record["tools"] = tools
        if kind == "rendered":
            assert isinstance(value, str), (name, c["id"], type(value))
            record["rendered"] = value
        else:
            record["error"] = True
            record["error_type"], record["error_message"] = value

        if has_top_level_none(messages):
            # The same environment and variables, without apply_chat_template's dropping of None keys.
            kind2, value2 = render(lambda: render_jinja_template(
                conversations=[copy.deepcopy(messages)], tools=copy.deepcopy(tools),
                chat_template=spec["chat_template"], add_generation_prompt=agp,
                **{**tok.special_tokens_map, **copy.deepcopy(kwargs)})[0][0])
            if kind2 == "rendered":
                record["rendered_keep_none"] = value2
            else:
                record["error_keep_none"] = True
                record["error_keep_none_message"] = value2[1]
        lines.append(to_json_line(record))

    ids = [json.loads(line)["id"] for line in lines]
    assert len(ids) == len(set(ids)), f"{name}: duplicate case ids"
    assert len(lines) >= MIN_CASES, f"{name}: only {len(lines)} cases"
    text = "\n".join(lines) + "\n"
    size = len(text.encode("utf-8"))
    assert size < MAX_FILE_BYTES, f"{name}: {size} bytes"
    out = GOLDEN_DIR / f"{name}.jsonl"
    out.write_text(text, encoding="utf-8")
    errors = sum('"error": true' in line for line in lines)
    print(f"wrote {out.relative_to(ROOT)}: {len(lines)} cases ({errors} errors), {size} bytes")
    return len(lines)


def main(argv):
    names = argv or NAMES
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown template name(s): {unknown}; known: {NAMES}")
    print(f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}")
    tok_path = tokenizer_json_path()
    for name in names:
        make_golden(name, tok_path)


if __name__ == "__main__":
    main(sys.argv[1:])
