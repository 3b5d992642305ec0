"""Structured output through `gannet generate`, checked by an independent validator (jsonschema):
every output that ends on its own parses and validates against its schema, formats included."""
import json
import pathlib
import re

import jsonschema
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "data" / "json_schema_suite.jsonl"

Validator = jsonschema.Draft202012Validator
FORMATS = Validator.FORMAT_CHECKER


def load_suite():
    return [json.loads(l) for l in SUITE.read_text(encoding="utf-8").splitlines() if l.strip()]


def run_prompts(gannet, model, path, lines, *extra):
    path.write_text("\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n")
    p = gannet(["generate", "--model", str(model), "--prompts", str(path), "--json", *extra], check=False)
    return p, [json.loads(l) for l in p.stdout.splitlines()]


def longest_whitespace_run(text):
    """The longest run of JSON whitespace outside string literals."""
    longest = run = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            continue
        if c in " \t\n\r":
            run += 1
            longest = max(longest, run)
            continue
        run = 0
        in_string = c == '"'
    return longest


def violation(schema, text, max_whitespace=0):
    """Why text is not a document of schema (None when it is)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        return f"not JSON: {e}"
    errors = sorted(Validator(schema, format_checker=FORMATS).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        return "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    if longest_whitespace_run(text) > max_whitespace:
        return f"whitespace run of {longest_whitespace_run(text)} outside strings (max_whitespace {max_whitespace})"
    return None


def check_outputs(rows, requests, out):
    """Per-line failures: errors, and outputs that stopped but do not validate; plus the stopped count."""
    assert len(out) == len(requests)
    failures, stopped = [], 0
    for row, req, line in zip(rows, requests, out):
        if "error" in line:
            failures.append(f"{row['name']}: error {line['error']!r}")
            continue
        if line["finish_reason"] != "stop":
            continue
        stopped += 1
        if "structured" in req:
            why = violation(row["schema"], line["text"], req["structured"].get("max_whitespace", 0))
        else:
            why = violation(row["schema"], line["text"])
        if why:
            failures.append(f"{row['name']} (seed {req.get('seed')}, temperature {req['temperature']}): "
                            f"{why}\n    text: {line['text']!r}")
    return failures, stopped


def test_format_checker_is_active():
    # Without these the format keywords would validate anything and the checks below would prove less.
    assert {"date", "date-time", "time", "email", "uuid"} <= set(FORMATS.checkers)
    for fmt, good, bad in [("date", "2024-02-29", "2024-13-01"),
                           ("date", "2024-02-29", "2023-02-29"),
                           ("date-time", "2024-01-31T23:59:59.5+05:30", "2024-01-31T24:00:00Z"),
                           ("date-time", "2024-01-31T23:59:59Z", "2024-04-31T12:00:00Z"),
                           ("time", "08:30:00Z", "08:30"),
                           ("email", "a.b@example.org", "a.b example.org"),
                           ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000")]:
        v = Validator({"type": "string", "format": fmt}, format_checker=FORMATS)
        assert v.is_valid(good), (fmt, good)
        assert not v.is_valid(bad), (fmt, bad)


@pytest.fixture(scope="module")
def sampled_suite(gannet, tiny_models, tmp_path_factory):
    """Every schema of the suite, one request each, sampled at temperature 1 with its own seed."""
    rows = load_suite()
    requests = [{"prompt": f"Fill in the form: {row['name']}", "max_tokens": 256, "temperature": 1.0, "seed": i,
                 "response_format": {"type": "json_schema",
                                     "json_schema": {"name": row["name"], "schema": row["schema"]}}}
                for i, row in enumerate(rows)]
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path_factory.mktemp("suite") / "p.jsonl", requests)
    return rows, requests, p, out


def test_sampled_outputs_validate(sampled_suite):
    rows, requests, p, out = sampled_suite
    assert p.returncode == 0, p.stderr
    assert len(rows) >= 100
    failures, _ = check_outputs(rows, requests, out)
    assert not failures, f"{len(failures)} of {len(out)} lines fail:\n" + "\n".join(failures)


def test_enough_sampled_outputs_stop(sampled_suite):
    # A random-weight model wanders inside free strings (only tokens with a quote close
    # one), so many documents reach max_tokens; enough must finish that the validation
    # above covers most shapes of the suite. Seeds are fixed, so this count is exact.
    rows, requests, _, out = sampled_suite
    reasons = [line.get("finish_reason") for line in out]
    stopped = reasons.count("stop")
    assert stopped >= 40 and reasons.count("length") == len(out) - stopped, (
        f"{stopped} of {len(out)} stop, {reasons.count('length')} reach max_tokens "
        f"({requests[0]['max_tokens']}); still running: {[r['name'] for r, x in zip(rows, reasons) if x != 'stop']}")


def test_greedy_and_structured_field_validate(gannet, tiny_models, tmp_path):
    rows = load_suite()[::5]
    requests = []
    for i, row in enumerate(rows):
        req = {"prompt": f"Fill in the form: {row['name']}", "max_tokens": 400, "temperature": 0}
        if i % 2:
            req["structured"] = {"json_schema": row["schema"], "max_whitespace": 2}
        else:
            req["response_format"] = {"type": "json_schema", "json_schema": {"name": row["name"], "schema": row["schema"]}}
        requests.append(req)
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path / "p.jsonl", requests)
    assert p.returncode == 0, p.stderr
    failures, stopped = check_outputs(rows, requests, out)
    assert not failures, f"{len(failures)} of {len(out)} lines fail:\n" + "\n".join(failures)
    # Both spellings must have produced documents that were checked, not only cut-off ones.
    for kind in ("response_format", "structured"):
        assert any(line["finish_reason"] == "stop" for req, line in zip(requests, out) if kind in req), kind


def test_regex_outputs_fully_match(gannet, tiny_models, tmp_path):
    pattern = "[a-z]{3}-[0-9]{2}"
    requests = [{"prompt": f"Give me a code, number {s}", "max_tokens": 20, "temperature": 1.0, "seed": 100 + s,
                 "structured": {"regex": pattern}} for s in range(10)]
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path / "p.jsonl", requests)
    assert p.returncode == 0, p.stderr
    assert len(out) == len(requests)
    for req, line in zip(requests, out):
        assert "error" not in line, line
        assert line["finish_reason"] == "stop", (req["seed"], line)
        assert re.fullmatch(pattern, line["text"]), (req["seed"], line["text"])


def test_bad_structured_requests_get_error_lines_in_place(gannet, tiny_models, tmp_path):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    ok = {"prompt": "fine", "max_tokens": 20, "temperature": 1.0, "seed": 3,
          "response_format": {"type": "json_schema", "json_schema": {"name": "ok", "schema": schema}}}
    lines = [
        ok,
        {"prompt": "pattern properties", "max_tokens": 20,
         "response_format": {"type": "json_schema", "json_schema": {
             "name": "pp", "schema": {"type": "object", "patternProperties": {"^x": {}}}}}},
        {"prompt": "no schema", "max_tokens": 20, "response_format": {"type": "json_schema"}},
        {"prompt": "two kinds", "max_tokens": 20, "structured": {"regex": "a", "grammar": "root ::= \"a\""}},
        {"prompt": "endless", "max_tokens": 20, "structured": {"json_object": True}, "ignore_eos": True},
        {"prompt": "regex", "max_tokens": 20, "temperature": 1.0, "seed": 4, "structured": {"regex": "[a-z]{3}-[0-9]{2}"}},
        {"prompt": "json object", "max_tokens": 400, "temperature": 1.0, "seed": 5,
         "structured": {"json_object": True}},
    ]
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path / "p.jsonl", lines)
    assert p.returncode == 1, p.stderr
    assert len(out) == len(lines)
    # A schema gannet cannot compile fails that request alone, naming the keyword and where it is.
    assert "patternProperties" in out[1]["error"] and out[1]["finish_reason"] == "error", out[1]
    assert out[1]["text"] == "" and out[1]["token_ids"] == []
    # Malformed fields are refused when the line is read.
    assert "line 3" in out[2]["error"] and "needs 'json_schema'" in out[2]["error"], out[2]
    assert "line 4" in out[3]["error"] and "exactly one of" in out[3]["error"], out[3]
    assert "line 5" in out[4]["error"] and "ignore_eos" in out[4]["error"], out[4]
    # The others complete as if alone.
    for i in (0, 5, 6):
        assert "error" not in out[i], out[i]
        assert out[i]["prompt"] == lines[i]["prompt"]
    assert out[0]["finish_reason"] == "stop" and violation(schema, out[0]["text"]) is None, out[0]
    assert out[5]["finish_reason"] == "stop" and re.fullmatch("[a-z]{3}-[0-9]{2}", out[5]["text"]), out[5]
    if out[6]["finish_reason"] == "stop":
        assert isinstance(json.loads(out[6]["text"]), dict), out[6]
    _, alone = run_prompts(gannet, tiny_models["llama"], tmp_path / "alone.jsonl", [lines[0], lines[5], lines[6]])
    assert [a["token_ids"] for a in alone] == [out[i]["token_ids"] for i in (0, 5, 6)]


def test_n_samples_all_validate(gannet, tiny_models, tmp_path):
    # A finite language (bounded integer, enum, boolean, short string), so every sample must end.
    schema = {"type": "object",
              "properties": {"level": {"type": "integer", "minimum": 1, "maximum": 5},
                             "mood": {"enum": ["calm", "busy", "tired"]},
                             "ok": {"type": "boolean"},
                             "code": {"type": "string", "pattern": "^[A-Z]{2}$"}},
              "required": ["level", "mood", "ok", "code"], "additionalProperties": False}
    requests = [{"prompt": "Two forms, please", "n": 2, "max_tokens": 100, "temperature": 1.0, "seed": s,
                 "response_format": {"type": "json_schema", "json_schema": {"name": "two", "schema": schema}}}
                for s in (21, 22)]
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path / "p.jsonl", requests)
    assert p.returncode == 0, p.stderr
    for req, line in zip(requests, out):
        assert "error" not in line, line
        assert len(line["outputs"]) == 2
        assert line["outputs"][0]["text"] == line["text"]
        for o in line["outputs"]:
            assert o["finish_reason"] == "stop", (req["seed"], o)
            assert violation(schema, o["text"]) is None, (req["seed"], o["text"], violation(schema, o["text"]))


def test_validator_agrees_with_the_suite_examples():
    # The independent check accepts each schema's valid documents and refuses its invalid ones.
    for row in load_suite():
        for doc in row["valid"]:
            assert violation(row["schema"], doc) is None, (row["name"], doc)
        for bad in row["invalid"]:
            assert violation(row["schema"], bad["doc"]) is not None, (row["name"], bad)


def test_response_format_max_whitespace_is_honoured(gannet, tiny_models, tmp_path):
    # OpenAI's response_format takes gannet's max_whitespace for both JSON types: the same
    # request through response_format and through 'structured' gives the same tokens, and
    # with n >= 1 whitespace (", " and ": " as json.dumps writes them) is allowed, bounded.
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                                "b": {"type": "boolean"}},
              "required": ["a", "b"], "additionalProperties": False}
    fmts = [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "ab", "schema": schema}}]
    spellings = []
    for w in (0, 1, 3):
        for f, structured in zip(fmts, [{"json_object": True}, {"json_schema": schema}]):
            for seed in range(6):
                base = {"prompt": f"JSON please {seed}", "max_tokens": 120, "temperature": 1.0, "seed": seed}
                spellings.append((w, f, dict(base, response_format=dict(f, max_whitespace=w)),
                                  dict(base, structured=dict(structured, max_whitespace=w))))
    lines = [x for _, _, r, s in spellings for x in (r, s)]
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path / "p.jsonl", lines)
    assert p.returncode == 0, p.stderr
    longest = {0: 0, 1: 0, 3: 0}
    stopped = 0
    for i, (w, f, r, s) in enumerate(spellings):
        a, b = out[2 * i], out[2 * i + 1]
        assert "error" not in a and "error" not in b, (a, b)
        assert a["token_ids"] == b["token_ids"], (w, f["type"], r["seed"])
        if a["finish_reason"] != "stop":
            continue
        stopped += 1
        why = violation(schema if f["type"] == "json_schema" else {"type": "object"}, a["text"], w)
        assert why is None, (w, f["type"], why, a["text"])
        longest[w] = max(longest[w], longest_whitespace_run(a["text"]))
    assert stopped >= 6, stopped
    # The setting changed what was generated: whitespace appears only where it is allowed.
    assert longest[0] == 0 and longest[1] == 1 and longest[3] >= 2, longest


def test_response_format_max_whitespace_errors_name_the_field(gannet, tiny_models, tmp_path):
    lines = [{"prompt": "x", "max_tokens": 5, "response_format": {"type": "json_object", "max_whitespace": -1}},
             {"prompt": "x", "max_tokens": 5, "response_format": {"type": "json_object", "max_whitespace": "2"}},
             {"prompt": "x", "max_tokens": 5, "response_format": {"type": "text", "max_whitespace": 1}},
             {"prompt": "x", "max_tokens": 5, "response_format": {"type": "json_object", "max_whitespace": 65}}]
    p, out = run_prompts(gannet, tiny_models["llama"], tmp_path / "p.jsonl", lines)
    assert p.returncode == 1 and len(out) == len(lines), p.stderr
    assert "'response_format.max_whitespace' must be in [0, 64], got -1" in out[0]["error"], out[0]
    assert "'response_format.max_whitespace' must be an integer" in out[1]["error"], out[1]
    assert "of type 'text' has an unknown field 'max_whitespace'" in out[2]["error"], out[2]
    assert "got 65" in out[3]["error"], out[3]
