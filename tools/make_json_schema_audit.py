#!/usr/bin/env python3
# Makes tests/data/json_schema_audit.jsonl: for each JSON Schema keyword the structured-output
# grammar supports, schemas at the keyword's edges and documents drawn for them by an
# independent generator (hypothesis-jsonschema), each kept only if the `jsonschema` package
# (Draft 2020-12, with its format checker) validates it.
# Rerun: python3 -m venv .venv-audit && .venv-audit/bin/pip install -q -r tools/requirements-audit.txt
#        .venv-audit/bin/python tools/make_json_schema_audit.py
"""Audit documents for src/structured/json_schema.cpp (tests/unit/test_structured_audit.cpp).

Each output line: {"keyword", "name", "schema", "docs": [{"compact", "spaced", "indented"}, ...],
"beyond_policy": [compact, ...], "dropped": N}. A document is written three ways, as client JSON encoders write it:
compact (separators "," and ":"), spaced (Python's default ", " and ": ") and indented
(indent=2). The C++ test checks the grammar accepts the compact form without whitespace,
and each other form exactly when its longest whitespace run fits max_whitespace.

Per schema the documents are the generator's edges (the smallest and the largest of its
draws: hypothesis starts from its simplest example, so empty arrays and objects with every
optional member absent) and its first draws. hypothesis runs
derandomized, so a rerun with the same package versions writes the same file.

gannet generates objects by a documented policy narrower than JSON Schema (json_schema.h:
declared members in the schema's order; others only where additionalProperties allows
them explicitly), as XGrammar's strict mode and OpenAI's strict structured outputs do. A
draw is written as that policy orders it (the same document to a JSON reader: the
`jsonschema` package validates it again); the draws the policy leaves out (members in
another order, undeclared members) are listed in `beyond_policy`, which the test checks
are refused, so the policy is exactly as documented.

`dropped` counts draws the `jsonschema` checker refused (hypothesis-jsonschema's format
strategies are looser than the checker in places); those say nothing about the grammar.
"""

import copy
import json
import sys
from pathlib import Path

import jsonschema
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "json_schema_audit.jsonl"
DRAWS = 24

# (keyword, name, schema). Every keyword json_schema.h lists as supported appears at least
# once; the edges are the bounds each keyword has (zero, one, equal min and max, absent).
S = "https://json-schema.org/draft/2020-12/schema"


def TREE(kid):
    return {"type": "object", "properties": {"v": {"type": "integer"},
                                             "kids": {"type": "array", "items": kid(), "maxItems": 2}},
            "required": ["v"], "additionalProperties": False}


SCHEMAS = [
    ("type", "null", {"type": "null"}),
    ("type", "boolean", {"type": "boolean"}),
    ("type", "integer", {"type": "integer"}),
    ("type", "number", {"type": "number"}),
    ("type", "string", {"type": "string"}),
    ("type", "list", {"type": ["integer", "null", "string"]}),
    ("type", "any-array", {"type": "array"}),
    ("type", "any-object", {"type": "object"}),
    ("properties", "all-optional", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}),
    ("properties", "nested", {"type": "object", "properties": {"o": {"type": "object", "properties": {"x": {"type": "boolean"}}}}}),
    ("required", "some-required",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
      "required": ["b"], "additionalProperties": False}),
    ("required", "all-required",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a", "b"],
      "additionalProperties": False}),
    ("additionalProperties", "false",
     {"type": "object", "properties": {"k": {"type": "string"}}, "additionalProperties": False}),
    ("additionalProperties", "true", {"type": "object", "properties": {"k": {"type": "integer"}}, "additionalProperties": True}),
    ("additionalProperties", "schema",
     {"type": "object", "properties": {"k": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}}),
    ("enum", "mixed", {"enum": ["red", 3, None, True, [1, 2], {"k": "v"}]}),
    ("enum", "strings", {"type": "string", "enum": ["", "a", "a\"b", "\u00e9t\u00e9"]}),
    ("const", "object", {"const": {"a": [1, "x"], "b": None}}),
    ("const", "string", {"const": "tab\there"}),
    ("anyOf", "types", {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]}),
    ("anyOf", "objects", {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                     "additionalProperties": False},
                                    {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}]}),
    ("oneOf", "disjoint", {"oneOf": [{"type": "boolean"}, {"type": "null"}, {"type": "integer", "minimum": 5}]}),
    ("allOf", "merged", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                   {"properties": {"b": {"type": "string"}}}],
                         "additionalProperties": False, "properties": {"a": {}, "b": {}}}),
    ("allOf", "bounds", {"allOf": [{"type": "integer", "minimum": -3}, {"maximum": 40}]}),
    ("items", "integers", {"type": "array", "items": {"type": "integer"}}),
    ("items", "objects", {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "null"}}}}),
    # hypothesis-jsonschema reads drafts 4 to 7, where prefixItems were spelled items: [...]
    # with additionalItems: the fourth element is that spelling, for the generator only.
    ("prefixItems", "items-false",
     {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}], "items": False},
     {"type": "array", "items": [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}], "additionalItems": False}),
    ("prefixItems", "items-schema",
     {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}, "maxItems": 4},
     {"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "integer"}, "maxItems": 4}),
    ("prefixItems", "min-items",
     {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "null"}], "items": False, "minItems": 1},
     {"type": "array", "items": [{"type": "integer"}, {"type": "null"}], "additionalItems": False, "minItems": 1}),
    ("prefixItems", "open", {"type": "array", "prefixItems": [{"type": "boolean"}], "maxItems": 3},
     {"type": "array", "items": [{"type": "boolean"}], "maxItems": 3}),
    ("minItems", "one", {"type": "array", "items": {"type": "boolean"}, "minItems": 1}),
    ("minItems", "three", {"type": "array", "items": {"type": "null"}, "minItems": 3, "maxItems": 5}),
    ("maxItems", "zero", {"type": "array", "maxItems": 0}),
    ("maxItems", "equal", {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}),
    ("minLength", "one", {"type": "string", "minLength": 1}),
    ("minLength", "five", {"type": "string", "minLength": 5, "maxLength": 8}),
    ("maxLength", "zero", {"type": "string", "maxLength": 0}),
    ("maxLength", "two", {"type": "string", "maxLength": 2}),
    ("pattern", "anchored", {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"}),
    ("pattern", "search", {"type": "string", "pattern": "ab+c"}),
    ("pattern", "alternation", {"type": "string", "pattern": "^(cat|dog)s?$"}),
    ("format", "date", {"type": "string", "format": "date"}),
    ("format", "time", {"type": "string", "format": "time"}),
    ("format", "date-time", {"type": "string", "format": "date-time"}),
    ("format", "uuid", {"type": "string", "format": "uuid"}),
    ("format", "email", {"type": "string", "format": "email"}),
    ("$ref", "defs", {"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                                      "additionalProperties": False}},
                      "type": "array", "items": {"$ref": "#/$defs/p"}, "maxItems": 3}),
    # The generator cannot follow recursion: its spelling unrolls the tree three levels deep.
    ("$ref", "recursive", {"$defs": {"t": TREE(lambda: {"$ref": "#/$defs/t"})}, "$ref": "#/$defs/t"},
     TREE(lambda: TREE(lambda: TREE(lambda: False)))),
    ("$defs", "definitions", {"definitions": {"b": {"type": "boolean"}}, "type": "object",
                              "properties": {"f": {"$ref": "#/definitions/b"}}, "additionalProperties": False}),
    ("minimum", "minimum", {"type": "integer", "minimum": -17}),
    ("maximum", "maximum", {"type": "integer", "maximum": 1000}),
    ("minimum", "range", {"type": "integer", "minimum": 7, "maximum": 123}),
    ("exclusiveMinimum", "exclusive-min", {"type": "integer", "exclusiveMinimum": 0}),
    ("exclusiveMaximum", "exclusive-max", {"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 5}),
    ("annotations", "annotated", {"$schema": S, "title": "t", "description": "d", "type": "object",
                                  "properties": {"a": {"type": "string", "default": "x", "examples": ["y"], "deprecated": True,
                                                       "readOnly": True}},
                                  "additionalProperties": False, "$comment": "c"}),
]


# hypothesis-jsonschema has no uuid strategy (it would draw any string): hypothesis's own
# UUIDs, in both letter cases.
FORMATS = {"uuid": st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())}


def size(x):
    """A document's size for the edge searches: members, items and characters."""
    if isinstance(x, dict):
        return 1 + sum(1 + size(v) for v in x.values())
    if isinstance(x, list):
        return 1 + sum(size(v) for v in x)
    if isinstance(x, str):
        return len(x)
    return 1


def sample(strategy):
    """The smallest and the largest documents of 200 derandomized draws (hypothesis begins
    with its simplest example: empty arrays, objects with only required members), then the
    first DRAWS draws."""
    got = []

    @given(strategy)
    @settings(database=None, derandomize=True, max_examples=200, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    def take(x):
        got.append(x)

    take()
    if not got:
        return []
    by_size = sorted(range(len(got)), key=lambda i: size(got[i]))
    return [got[by_size[0]], got[by_size[-1]]] + got[:DRAWS]


def policy(x, schema, root, validator_for):
    """x as gannet's documented generation policy writes it (json_schema.h): an object's
    declared members in the schema's order, then its other members only where
    additionalProperties is given (true or a schema) and not false."""
    while isinstance(schema, dict) and "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            if part:
                target = target[part]
        schema = {**{k: v for k, v in schema.items() if k != "$ref"}, **target}
    if not isinstance(schema, dict) or "enum" in schema or "const" in schema:
        return x
    if not set(schema) & {"type", "properties", "additionalProperties", "required", "items", "prefixItems", "anyOf",
                          "oneOf", "allOf"}:
        return x  # any JSON value
    for k in ("anyOf", "oneOf"):
        if k in schema:  # the first branch that holds x
            for branch in schema[k]:
                merged = {**{a: b for a, b in schema.items() if a != k}, **branch}
                if validator_for(merged).is_valid(x):
                    return policy(x, merged, root, validator_for)
            return x
    if "allOf" in schema:  # the branches' properties in order, then the siblings'
        merged = {a: b for a, b in schema.items() if a != "allOf"}
        props = {}
        for branch in schema["allOf"] + [merged]:
            for key, sub in branch.get("properties", {}).items():
                props.setdefault(key, {"allOf": []})["allOf"].append(sub)
            for a, b in branch.items():
                if a not in ("properties",):
                    merged.setdefault(a, b)
        merged["properties"] = props
        return policy(x, merged, root, validator_for)
    if isinstance(x, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out = {k: policy(x[k], props[k], root, validator_for) for k in props if k in x}
        if extra is not None and extra is not False:
            for k, v in x.items():
                if k not in props:
                    out[k] = policy(v, extra if isinstance(extra, dict) else {}, root, validator_for)
        return out
    if isinstance(x, list):
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", {})
        return [policy(v, prefix[i] if i < len(prefix) else items, root, validator_for) for i, v in enumerate(x)]
    return x


def forms(x):
    return {"compact": json.dumps(x, separators=(",", ":"), ensure_ascii=False),
            "spaced": json.dumps(x, ensure_ascii=False), "indented": json.dumps(x, indent=2, ensure_ascii=False)}


def main():
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER

    def validator_for(s, root=None):
        return jsonschema.Draft202012Validator(s if root is None else {**root, **s}, format_checker=checker)

    names = set()
    lines = []
    for keyword, name, schema, *spelled in SCHEMAS:
        assert (keyword, name) not in names, name
        names.add((keyword, name))
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = validator_for(schema)
        defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
        # from_schema resolves references in place: it gets a copy
        strategy = from_schema(copy.deepcopy(spelled[0] if spelled else schema), custom_formats=FORMATS)
        docs, beyond, seen, dropped = [], [], set(), 0
        for x in sample(strategy):
            if not validator.is_valid(x):
                dropped += 1
                continue
            p = policy(x, schema, schema, lambda s: validator_for(s, defs))
            assert validator.is_valid(p), (name, x, p)
            for y, out in ((p, docs), (x, beyond)):
                f = forms(y)
                if f["compact"] in seen:
                    continue
                seen.add(f["compact"])
                out.append(f)
        if not docs:
            sys.exit(f"{keyword}/{name}: no document validated")
        lines.append(json.dumps({"keyword": keyword, "name": name, "schema": schema, "docs": docs,
                                 "beyond_policy": [b["compact"] for b in beyond], "dropped": dropped},
                                ensure_ascii=False))
        print(f"{keyword:>20} {name:<16} {len(docs):3d} docs  {len(beyond):3d} beyond the policy  {dropped} dropped",
              file=sys.stderr)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(lines)} schemas)", file=sys.stderr)


if __name__ == "__main__":
    main()
