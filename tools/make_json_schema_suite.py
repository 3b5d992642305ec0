#!/usr/bin/env python3
# Makes tests/data/json_schema_suite.jsonl: JSON Schemas with compact valid docs and invalid docs (each with bad_at, its first bad byte).
# Rerun: .venv/bin/python tools/make_json_schema_suite.py   (needs jsonschema and rfc3339-validator in .venv; the output is deterministic)
"""JSON Schema test suite for the structured-output grammar (src/structured/json_schema.cpp).

Each output line: {"name", "schema", "valid": [doc, ...], "invalid": [{"doc", "bad_at", "why"}, ...]}
where every doc is compact JSON text. bad_at is the UTF-8 byte offset of the first byte at which no
document valid under the grammar's semantics can continue the prefix (null: every byte continues a
valid prefix but the document is incomplete).

Invalid docs are written below with a caret mark (MARK, U+2038) in front of the bad character, so
bad_at comes from how the doc is built. A small independent recogniser of the grammar's semantics
(Grammar, further down) recomputes it, and the two must agree; the jsonschema package must also
accept every valid doc and reject every invalid one.
"""

import json
import re
import sys
from pathlib import Path

import jsonschema

MARK = "\u2038"  # "‸": put right before the first bad character of an invalid doc
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "json_schema_suite.jsonl"


def compact(x):
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# A minimal regex engine (the ECMAScript subset the suite uses) with prefix viability.
# ---------------------------------------------------------------------------------------------


class CharSet:
    def __init__(self, ranges, negate=False):
        self.ranges, self.negate = list(ranges), negate

    def __contains__(self, c):
        o = ord(c)
        return any(a <= o <= b for a, b in self.ranges) != self.negate


DIGIT = [(0x30, 0x39)]
WORD = [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x5F, 0x5F)]
SPACE = [(0x09, 0x0D), (0x20, 0x20)]
ANY_CHAR = CharSet([], negate=True)  # [^]


def parse_regex(p):
    """AST: ('set', CharSet) | ('cat', [n]) | ('alt', [n]) | ('rep', n, lo, hi)."""
    pos = 0

    def more():
        return pos < len(p)

    def alt():
        nonlocal pos
        branches = [seq()]
        while more() and p[pos] == "|":
            pos += 1
            branches.append(seq())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def seq():
        items = []
        while more() and p[pos] not in "|)":
            items.append(repeat())
        return ("cat", items)

    def repeat():
        nonlocal pos
        node = atom()
        while more() and p[pos] in "*+?{":
            c = p[pos]
            if c == "{":
                m = re.match(r"\{(\d+)(,(\d*))?\}", p[pos:])
                assert m, f"bad quantifier in {p!r}"
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                pos += m.end()
            else:
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                pos += 1
            if more() and p[pos] == "?":  # lazy: same language
                pos += 1
            node = ("rep", node, lo, hi)
        return node

    def escape_ranges(c):
        return {"d": (DIGIT, False), "D": (DIGIT, True), "w": (WORD, False), "W": (WORD, True),
                "s": (SPACE, False), "S": (SPACE, True)}.get(c)

    def atom():
        nonlocal pos
        c = p[pos]
        if c == "(":
            pos += 1
            if p.startswith("?:", pos):
                pos += 2
            node = alt()
            assert more() and p[pos] == ")", f"unbalanced ( in {p!r}"
            pos += 1
            return node
        if c == "[":
            return char_class()
        if c == "\\":
            e = p[pos + 1]
            pos += 2
            esc = escape_ranges(e)
            if esc:
                return ("set", CharSet(*esc))
            assert not e.isalnum(), f"unsupported escape \\{e} in {p!r}"
            return ("set", CharSet([(ord(e), ord(e))]))
        if c == ".":
            pos += 1
            return ("set", CharSet([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)], negate=True))
        assert c not in "^$)*+?{|", f"unsupported {c!r} at {pos} in {p!r} (^ and $ only at the ends)"
        pos += 1
        return ("set", CharSet([(ord(c), ord(c))]))

    def char_class():
        nonlocal pos
        pos += 1
        negate = more() and p[pos] == "^"
        if negate:
            pos += 1
        ranges = []
        while p[pos] != "]":
            c = p[pos]
            if c == "\\":
                e = p[pos + 1]
                pos += 2
                esc = escape_ranges(e)
                if esc:
                    assert not esc[1], "negated escapes inside classes are not supported"
                    ranges += esc[0]
                    continue
                lo = ord(e)
            else:
                lo = ord(c)
                pos += 1
            if p[pos] == "-" and p[pos + 1] != "]":
                hi_c = p[pos + 1]
                if hi_c == "\\":
                    hi_c = p[pos + 2]
                    pos += 1
                pos += 2
                ranges.append((lo, ord(hi_c)))
            else:
                ranges.append((lo, lo))
        pos += 1
        return ("set", CharSet(ranges, negate))

    node = alt()
    assert pos == len(p), f"trailing text in {p!r}"
    return node


class NFA:
    """Thompson NFA over code points. Every state can reach the accepting one, so a non-empty
    state set means the text so far is a viable prefix."""

    def __init__(self, ast):
        self.eps, self.edges = [], []
        self.start, self.end = self._build(ast)
        self.initial = self.closure({self.start})

    def _new(self):
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def _build(self, n):
        kind = n[0]
        if kind == "set":
            s, e = self._new(), self._new()
            self.edges[s].append((n[1], e))
            return s, e
        if kind == "cat":
            s = cur = self._new()
            for sub in n[1]:
                a, b = self._build(sub)
                self.eps[cur].append(a)
                cur = b
            return s, cur
        if kind == "alt":
            s, e = self._new(), self._new()
            for sub in n[1]:
                a, b = self._build(sub)
                self.eps[s].append(a)
                self.eps[b].append(e)
            return s, e
        _, sub, lo, hi = n
        s = cur = self._new()
        for _ in range(lo):
            a, b = self._build(sub)
            self.eps[cur].append(a)
            cur = b
        if hi is None:
            a, b = self._build(sub)
            e = self._new()
            self.eps[cur] += [a, e]
            self.eps[b] += [a, e]
            return s, e
        for _ in range(hi - lo):
            a, b = self._build(sub)
            e = self._new()
            self.eps[cur] += [a, e]
            self.eps[b].append(e)
            cur = e
        return s, cur

    def closure(self, states):
        out, todo = set(states), list(states)
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in out:
                    out.add(t)
                    todo.append(t)
        return frozenset(out)

    def step(self, states, c):
        return self.closure({t for s in states for cs, t in self.edges[s] if c in cs})

    def accepts(self, states):
        return self.end in states

    def full_match(self, text):
        states = self.initial
        for c in text:
            states = self.step(states, c)
        return self.accepts(states)


_NFA_CACHE = {}


def nfa_for(regex, search=False):
    """search=True: JSON Schema `pattern` semantics (unanchored ends match anything), as the
    grammar does it: a leading ^ / trailing $ anchor that end, otherwise [^]* is added there."""
    key = (regex, search)
    if key not in _NFA_CACHE:
        body = regex
        start = end = not search
        if search:
            start = body.startswith("^")
            end = body.endswith("$") and not body.endswith("\\$")
            body = body[1 if start else 0:len(body) - (1 if end else 0)]
        parts = [] if start else [("rep", ("set", ANY_CHAR), 0, None)]
        parts.append(parse_regex(body))
        if not end:
            parts.append(("rep", ("set", ANY_CHAR), 0, None))
        _NFA_CACHE[key] = NFA(("cat", parts))
    return _NFA_CACHE[key]


# The grammar's formats (src/structured/json_schema.cpp kFormats) and a looser reading of the
# same definitions (times as plain HH:MM:SS digits); bad_at must not depend on which one is used.
YEAR = r"([1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])"
DATE = (r"(" + YEAR + r"-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))"
        r"|(\d{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29)")
TIME = r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"
TIME_LOOSE = r"\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)"
OCTET = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
EMAIL = (r"([A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+|\"([ !#-\[\]-~]|\\[ -~])*\")"
         r"@([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*|\[(" + OCTET + r"(\." + OCTET + r"){3}|IPv6:[0-9A-Fa-f:.]+)\])")
FORMATS = {
    "date": DATE,
    "time": TIME,
    "date-time": DATE + "[Tt]" + TIME,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": EMAIL,
}
FORMATS_LOOSE = dict(FORMATS, time=TIME_LOOSE, **{"date-time": DATE + "[Tt]" + TIME_LOOSE})
NUMBER = r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?"
INTEGER = r"-?(0|[1-9]\d*)"

# ---------------------------------------------------------------------------------------------
# The grammar's semantics as a prefix recogniser.
# ---------------------------------------------------------------------------------------------

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment"}
KEYWORDS = {"type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf",
            "allOf", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern",
            "format", "$ref", "$defs", "definitions", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum"}
TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
INC = -1  # "ran out of text while still viable"
ANY = {"anyOf": [{"type": "object", "additionalProperties": True}, {"type": "array", "items": True},
                 {"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]}
PLAIN_STRING = {"type": "string"}


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def int_bounds(node):
    lo = hi = None
    for k, is_min, exclusive in (("minimum", True, False), ("exclusiveMinimum", True, True),
                                 ("maximum", False, False), ("exclusiveMaximum", False, True)):
        if k in node:
            d = node[k]
            b = -int(-d // 1) if is_min else int(d // 1)  # ceil for minimums, floor for maximums
            if exclusive and b == d:
                b += 1 if is_min else -1
            if is_min:
                lo = b if lo is None else max(lo, b)
            else:
                hi = b if hi is None else min(hi, b)
    return lo, hi


def int_prefix_viable(tok, lo, hi):
    """Does some integer in [lo, hi], written without leading zeros (and never as -0), start with tok?"""
    big = 10 ** 30
    lo_e, hi_e = (-big if lo is None else lo), (big if hi is None else hi)
    neg = tok.startswith("-")
    d = tok[1:] if neg else tok
    if d == "":
        return lo_e <= (min(hi_e, -1) if neg else hi_e)
    if not d.isdigit() or (len(d) > 1 and d[0] == "0"):
        return False
    if d == "0":
        return not neg and lo_e <= 0 <= hi_e
    v = int(d)
    for k in range(32):
        a, b = v * 10 ** k, (v + 1) * 10 ** k - 1
        if neg:
            a, b = -b, -a
        if a <= hi_e and b >= lo_e:
            return True
    return False


def int_complete(tok, lo, hi):
    if not re.fullmatch(INTEGER, tok) or tok == "-0":
        return False
    v = int(tok)
    return (lo is None or v >= lo) and (hi is None or v <= hi)


class Grammar:
    """Recognises prefixes of documents valid under the grammar's semantics for one schema.

    loose=False follows the engine: extra members may use any key, formats as kFormats.
    loose=True reads the rules differently where the spec leaves room: extra keys may not
    repeat a declared name, and times are any HH:MM:SS digits."""

    def __init__(self, root, loose=False):
        self.root, self.loose = root, loose
        self.formats = FORMATS_LOOSE if loose else FORMATS
        self.merged = {}
        self.pattern_checks = []  # (pattern, content, nfa says) for full strings, checked against re

    def resolve(self, ref):
        if ref == "#":
            return self.root
        for coll in ("$defs", "definitions"):
            prefix = f"#/{coll}/"
            if ref.startswith(prefix):
                return self.root[coll][ref[len(prefix):]]
        raise AssertionError(f"unresolvable $ref {ref}")

    def status(self, text):
        """(viable, complete): is text a prefix of a valid doc, and is it one."""
        self.s, self.memo = text, {}
        r = self.val(self.root, 0)
        return (INC in r or len(text) in r), len(text) in r

    # A value at i: the set of end offsets of complete parses, plus INC when the text ran out mid-way.
    def val(self, node, i):
        key = (id(node), i)
        if key not in self.memo:
            self.memo[key] = set()  # guards left recursion
            self.memo[key] = self._val(node, i)
        return self.memo[key]

    def _val(self, node, i):
        if node is True:
            node = ANY
        if node is False:
            return set()
        if "$ref" in node:
            return self.val(self.resolve(node["$ref"]), i)
        if "allOf" in node:
            return self.val(self._merge(node), i)
        for k in ("anyOf", "oneOf"):
            if k in node:
                out = set()
                for branch in node[k]:
                    out |= self.val(branch, i)
                return out
        types = node.get("type")
        types = [types] if isinstance(types, str) else types
        if "enum" in node or "const" in node:
            values = [node["const"]] if "const" in node else node["enum"]
            if "const" in node and "enum" in node and node["const"] not in node["enum"]:
                values = []
            out = set()
            for v in values:
                t = json_type(v)
                if types is None or t in types or (t == "integer" and "number" in types):
                    out |= self.lit(compact(v), i)
            return out
        if types is None:
            if any(k in node for k in ("properties", "additionalProperties", "required")):
                types = ["object"]
            elif any(k in node for k in ("items", "prefixItems")):
                types = ["array"]
            elif any(k in node for k in ("pattern", "format", "minLength", "maxLength")):
                types = ["string"]
            else:
                return self.val(ANY, i)
        out = set()
        for t in types:
            out |= self.typed(node, t, i)
        return out

    def _merge(self, node):
        if id(node) not in self.merged:
            merged = {k: v for k, v in node.items() if k not in ANNOTATIONS | {"allOf", "$defs", "definitions"}}
            sub = node["allOf"][0]
            while isinstance(sub, dict) and "$ref" in sub:
                sub = self.resolve(sub["$ref"])
            for k, v in sub.items():
                if k in ANNOTATIONS | {"$defs", "definitions"}:
                    continue
                assert merged.get(k, v) == v, f"allOf conflict on {k}"
                merged[k] = v
            self.merged[id(node)] = merged
        return self.merged[id(node)]

    def lit(self, lit, i):
        got = self.s[i:i + len(lit)]
        if len(got) < len(lit):
            return {INC} if lit.startswith(got) else set()
        return {i + len(lit)} if got == lit else set()

    def token(self, nfa, i):
        out, states, j = set(), nfa.initial, i
        while True:
            if nfa.accepts(states):
                out.add(j)
            if j == len(self.s):
                out.add(INC)
                return out
            states = nfa.step(states, self.s[j])
            if not states:
                return out
            j += 1

    def typed(self, node, t, i):
        if t == "null":
            return self.lit("null", i)
        if t == "boolean":
            return self.lit("true", i) | self.lit("false", i)
        if t == "number":
            return self.token(nfa_for(NUMBER), i)
        if t == "integer":
            return self.integer(node, i)
        if t == "string":
            return self.string(node, i)
        if t == "array":
            return self.array(node, i)
        assert t == "object", t
        return self.object(node, i)

    def integer(self, node, i):
        lo, hi = int_bounds(node)
        out, j, tok = set(), i, ""
        while True:
            if int_complete(tok, lo, hi):
                out.add(j)
            if j == len(self.s):
                if int_prefix_viable(tok, lo, hi):
                    out.add(INC)
                return out
            if not int_prefix_viable(tok + self.s[j], lo, hi):
                return out
            tok += self.s[j]
            j += 1

    def string(self, node, i):
        s = self.s
        if i == len(s):
            return {INC}
        if s[i] != '"':
            return set()
        regex = None
        if "format" in node:
            regex = nfa_for(self.formats[node["format"]])
        elif "pattern" in node:
            regex = nfa_for(node["pattern"], search=True)
        lo, hi = node.get("minLength", 0), node.get("maxLength")
        states, count, content, j = (regex.initial if regex else None), 0, "", i + 1
        while True:
            if j == len(s):
                return {INC}
            c = s[j]
            if c == '"':
                ok = count >= lo and (regex is None or regex.accepts(states))
                if "pattern" in node and regex is not None:
                    self.pattern_checks.append((node["pattern"], content, regex.accepts(states)))
                return {j + 1} if ok else set()
            if ord(c) < 0x20 or (hi is not None and count >= hi):
                return set()
            if c == "\\":
                esc = s[j + 1:j + 2]
                if esc == "":
                    return {INC}
                if esc in '"\\/bfnrt':
                    decoded = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}.get(esc, esc)
                    j += 2
                elif esc == "u":
                    hexes = s[j + 2:j + 6]
                    if not all(h in "0123456789abcdefABCDEF" for h in hexes):
                        return set()
                    if len(hexes) < 4:
                        return {INC}
                    decoded = chr(int(hexes, 16))
                    # pattern / format strings: \u only for what JSON must escape
                    if regex is not None and not (decoded < " " or decoded in '"\\'):
                        return set()
                    j += 6
                else:
                    return set()
                if regex is not None:  # the pattern sees the decoded character
                    states = regex.step(states, decoded)
                    if not states:
                        return set()
                    content += decoded
                count += 1
                continue
            if regex is not None:
                states = regex.step(states, c)
                if not states:
                    return set()
            content += c
            count += 1
            j += 1

    def array(self, node, i):
        s = self.s
        if i == len(s):
            return {INC}
        if s[i] != "[":
            return set()
        prefix = node.get("prefixItems", [])
        items = node.get("items", True)
        need = node.get("minItems", 0)  # a tuple's prefixes are valid too (JSON Schema 2020-12)
        hi = node.get("maxItems")

        def elems(j, n):
            if j == len(s):
                return {INC}
            out = set()
            if s[j] == "]" and n >= need:
                out.add(j + 1)
            sub = prefix[n] if n < len(prefix) else items
            if sub is False or (hi is not None and n >= hi):
                return out
            m = j
            if n > 0:
                if s[j] != ",":
                    return out
                m = j + 1
                if m == len(s):
                    return out | {INC}
            for e in self.val(sub, m):
                out |= {INC} if e == INC else elems(e, n + 1)
            return out

        return elems(i + 1, 0)

    def object(self, node, i):
        s = self.s
        if i == len(s):
            return {INC}
        if s[i] != "{":
            return set()
        props = list(node.get("properties", {}).items())
        names = {k for k, _ in props}
        req = set(node.get("required", []))
        extra = node.get("additionalProperties", False)
        n = len(props)

        def after_key(e, sub, then):
            if e == INC or e == len(s):
                return {INC}
            if s[e] != ":":
                return set()
            out = set()
            for v in self.val(sub, e + 1):
                out |= {INC} if v == INC else then(v)
            return out

        def members(j, k, first, in_extras):
            if j == len(s):
                return {INC}
            out = set()
            rest_required = any(name in req for name, _ in props[k:])
            if s[j] == "}" and not rest_required:
                out.add(j + 1)
            declared = [] if in_extras else [
                idx for idx in range(k, n) if not any(props[t][0] in req for t in range(k, idx))]
            extras_ok = extra is not False and not rest_required
            if not declared and not extras_ok:
                return out
            m = j
            if not first:
                if s[j] != ",":
                    return out
                m = j + 1
                if m == len(s):
                    return out | {INC}
            for idx in declared:
                name, sub = props[idx]
                for e in self.lit(compact(name), m):
                    out |= after_key(e, sub, lambda v, idx=idx: members(v, idx + 1, False, False))
            if extras_ok:
                for e in self.string(PLAIN_STRING, m):
                    if self.loose and e not in (INC, len(s)) and json.loads(s[m:e]) in names:
                        continue
                    out |= after_key(e, extra, lambda v: members(v, n, False, True))
            return out

        return members(i + 1, 0, True, False)


def first_bad(grammar, doc):
    """(bad_at as a byte offset or None, bad character or None, doc complete?)"""
    viable, complete = grammar.status(doc)
    if viable:
        return None, None, complete
    for k in range(len(doc)):
        if not grammar.status(doc[:k + 1])[0]:
            return len(doc[:k].encode()), doc[k], False
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------
# Static checks: the schema stays inside the subset the grammar supports.
# ---------------------------------------------------------------------------------------------


def check_subset(schema, where="#"):
    if isinstance(schema, bool):
        return
    assert isinstance(schema, dict), where
    keys = set(schema)
    unknown = keys - KEYWORDS - ANNOTATIONS
    assert not unknown, f"{where}: unsupported keywords {unknown}"
    core = keys - ANNOTATIONS - {"$defs", "definitions"}
    if "$ref" in schema:
        assert core == {"$ref"}, f"{where}: keywords beside $ref"
        ref = schema["$ref"]
        assert ref == "#" or re.fullmatch(r"#/(\$defs|definitions)/\w+", ref), f"{where}: $ref {ref}"
    for k in ("anyOf", "oneOf", "allOf"):
        if k in schema:
            assert core == {k}, f"{where}: keywords beside {k}"
            assert schema[k], where
            if k == "allOf":
                assert len(schema[k]) == 1, f"{where}: allOf must have exactly one subschema"
    if "enum" in schema or "const" in schema:
        assert core <= {"enum", "const", "type"}, f"{where}: keywords beside enum/const"
    t = schema.get("type")
    types = [t] if isinstance(t, str) else (t or [])
    assert set(types) <= TYPES, where
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        assert "integer" in types and "number" not in types, f"{where}: bounds only on integers"
    if "pattern" in schema or "format" in schema:
        assert not {"pattern", "format"} <= keys, where
        assert not keys & {"minLength", "maxLength"}, f"{where}: pattern/format with a length"
    if "format" in schema:
        assert schema["format"] in FORMATS, where
    if "pattern" in schema:
        nfa_for(schema["pattern"], search=True)  # parses
    if "object" in types and "enum" not in schema and "const" not in schema:
        assert "properties" in schema or schema.get("additionalProperties", False) is not False, \
            f"{where}: bare object type (the grammar allows only {{}}, JSON Schema anything)"
    if "array" in types and "enum" not in schema and "const" not in schema:
        assert "items" in schema, f"{where}: give items (a schema or false)"
    assert set(schema.get("required", [])) <= set(schema.get("properties", {})), where
    for name, sub in schema.get("properties", {}).items():
        check_subset(sub, f"{where}/properties/{name}")
    for k in ("additionalProperties", "items"):
        if k in schema:
            check_subset(schema[k], f"{where}/{k}")
    for k in ("prefixItems", "anyOf", "oneOf", "allOf"):
        for n, sub in enumerate(schema.get(k, [])):
            check_subset(sub, f"{where}/{k}/{n}")
    for k in ("$defs", "definitions"):
        for name, sub in schema.get(k, {}).items():
            check_subset(sub, f"{where}/{k}/{name}")


# ---------------------------------------------------------------------------------------------
# The suite. case(name, schema, valid docs as Python values, invalid docs as (marked text, why)).
# ---------------------------------------------------------------------------------------------

CASES = []


def case(name, schema, valid, invalid):
    CASES.append((name, schema, valid, invalid))


def obj(props, required=(), additional=None, **extra):
    """An object schema; additional=None leaves additionalProperties out."""
    out = {"type": "object", "properties": props}
    if required == "all":
        required = list(props)
    if required:
        out["required"] = list(required)
    if additional is not None:
        out["additionalProperties"] = additional
    out.update(extra)
    return out


def arr(items, **extra):
    return {"type": "array", "items": items, **extra}


S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}
NULL = {"type": "null"}


def fmt(f):
    return {"type": "string", "format": f}


def pat(p):
    return {"type": "string", "pattern": p}


def irange(lo=None, hi=None):
    out = {"type": "integer"}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def slen(lo=None, hi=None):
    out = {"type": "string"}
    if lo is not None:
        out["minLength"] = lo
    if hi is not None:
        out["maxLength"] = hi
    return out


def enum(*values):
    return {"enum": list(values)}


# DATA-BEGIN
# --- flat objects --------------------------------------------------------------------------------

case("person_required_optional",
     obj({"name": S, "age": I, "email": fmt("email")}, required=["name", "age"], additional=False),
     [{"name": "Alice", "age": 30},
      {"name": "Bob", "age": 0, "email": "bob@example.com"},
      {"name": "Zoë Ångström", "age": 41, "email": "zoe.a@mail.example.org"}],
     [('{"name":"Alice","age":‸"30"}', "age is a string"),
      ('{"name":"Zoë"‸}', "required age missing"),
      ('{"name":"Bob","age":5,"email":"bob‸ example.com"}', "email without @"),
      ('{"name":"Bob","age":5,"‸phone":"555"}', "property not in schema")])

case("flat_all_types_required",
     obj({"id": I, "label": S, "score": N, "active": B, "note": NULL}, required="all", additional=False),
     [{"id": 1, "label": "x", "score": 0.5, "active": True, "note": None},
      {"id": -42, "label": "", "score": 1e16, "active": False, "note": None},
      {"id": 7, "label": "tab\there \"quoted\"", "score": -3, "active": True, "note": None}],
     [('{"id":1‸.5,"label":"x","score":0.5,"active":true,"note":null}', "id has a fraction"),
      ('{"id":1,"label":"x","score":0.5,"active":‸"yes","note":null}', "active is a string"),
      ('{"id":1,"label":"x","score":0.5,"active":true,"note":‸0}', "note must be null"),
      ('{"id":1,"label":"x","score":0.5,"active":true‸}', "required note missing")])

case("settings_all_optional",
     obj({"nickname": S, "theme": enum("light", "dark"), "font_size": irange(8, 72)}, additional=False),
     [{}, {"theme": "dark"}, {"nickname": "kiki", "font_size": 14},
      {"nickname": "K", "theme": "light", "font_size": 72}],
     [('{"theme":"‸blue"}', "theme not in enum"),
      ('{"font_size":7‸}', "font_size below minimum"),
      ('{"font_size":10‸0}', "font_size above maximum"),
      ('{"‸colour":"red"}', "property not in schema")])

case("article_required_in_middle",
     obj({"title": S, "slug": S, "summary": S, "published": B}, required=["slug", "published"], additional=False),
     [{"slug": "a", "published": True},
      {"title": "Hello", "slug": "hello", "summary": "Hi", "published": False},
      {"title": "Ünïcödé", "slug": "unicode", "published": True}],
     [('{"title":"Hello","‸published":true}', "required slug missing"),
      ('{"slug":"a","summary":"résumé ✓"‸}', "required published missing"),
      ('{"slug":‸null,"published":true}', "slug is null")])

case("login_request",
     obj({"username": slen(3, 20), "password": slen(8), "remember_me": B},
         required=["username", "password"], additional=False),
     [{"username": "alice", "password": "correct horse"},
      {"username": "李小龙", "password": "pässwörd!", "remember_me": True},
      {"username": "bob_the_builder_2024", "password": "12345678", "remember_me": False}],
     [('{"username":"al‸","password":"12345678"}', "username shorter than 3"),
      ('{"username":"李小龙","password":"short‸"}', "password shorter than 8"),
      ('{"username":"alice","password":"longenough","remember_me":‸1}', "remember_me is a number"),
      ('{"username":"abcdefghijklmnopqrst‸u","password":"12345678"}', "username longer than 20")])

case("feature_flags",
     obj({"dark_mode": B, "beta": B, "max_upload_mb": irange(1, 1024)}, required="all", additional=False),
     [{"dark_mode": True, "beta": False, "max_upload_mb": 100},
      {"dark_mode": False, "beta": False, "max_upload_mb": 1024},
      {"dark_mode": False, "beta": True, "max_upload_mb": 1}],
     [('{"dark_mode":true,"beta":false,"max_upload_mb":‸0}', "max_upload_mb below 1"),
      ('{"dark_mode":true,"beta":false,"max_upload_mb":102‸5}', "max_upload_mb above 1024"),
      ('{"dark_mode":‸"true","beta":false,"max_upload_mb":1}', "dark_mode is a string")])

case("geo_coordinates",
     obj({"lat": N, "lon": N}, required="all", additional=False),
     [{"lat": 48.8566, "lon": 2.3522}, {"lat": -33.9, "lon": 151.2}, {"lat": 0, "lon": -0.1276}],
     [('{"lat":48.8566‸}', "lon missing"),
      ('{"lat":‸"48.8","lon":2.35}', "lat is a string"),
      ('{"lat":1,"lon":2‸,"alt":3}', "property not in schema")])

case("rgba_color",
     obj({"r": irange(0, 255), "g": irange(0, 255), "b": irange(0, 255), "a": N},
         required=["r", "g", "b"], additional=False),
     [{"r": 255, "g": 128, "b": 0}, {"r": 0, "g": 0, "b": 0, "a": 0.5}, {"r": 12, "g": 34, "b": 56, "a": 1}],
     [('{"r":25‸6,"g":0,"b":0}', "r above 255"),
      ('{"r":‸-1,"g":0,"b":0}', "r below 0"),
      ('{"r":1,"g":2‸}', "b missing")])

case("contact_form",
     obj({"name": slen(1, 50), "email": fmt("email"), "subject": enum("sales", "support", "other"),
          "message": slen(10, 500)}, required=["name", "email", "message"], additional=False),
     [{"name": "Jo", "email": "jo@example.com", "message": "Hello there, I need help."},
      {"name": "Émilie", "email": "emilie+test@exemple.fr", "subject": "support",
       "message": "Mon colis n'est pas arrivé.\nMerci."}],
     [('{"name":"‸","email":"a@b.co","message":"0123456789"}', "empty name"),
      ('{"name":"Jo","email":"jo@example.com","subject":"‸billing","message":"0123456789"}', "subject not in enum"),
      ('{"name":"Émilie","email":"jo@example.com","message":"court‸"}', "message shorter than 10"),
      ('{"name":"Jo","email":"jo#example.com‸","message":"0123456789"}', "email without @")])

case("pagination_params",
     obj({"page": irange(1), "per_page": irange(1, 100), "sort": enum("asc", "desc"),
          "cursor": {"type": ["string", "null"]}}, additional=False),
     [{}, {"page": 1, "per_page": 20}, {"page": 12345, "sort": "desc", "cursor": None},
      {"per_page": 100, "cursor": "eyJpZCI6MTB9"}],
     [('{"page":‸0}', "page below 1"),
      ('{"page":2,"per_page":10‸1}', "per_page above 100"),
      ('{"sort":"desc‸ending"}', "sort not in enum"),
      ('{"cursor":‸123}', "cursor is a number")])

case("rate_limit_status",
     obj({"limit": irange(0), "remaining": irange(0), "reset_at": fmt("date-time")}, required="all", additional=False),
     [{"limit": 5000, "remaining": 4999, "reset_at": "2024-06-01T12:00:00Z"},
      {"limit": 60, "remaining": 0, "reset_at": "2025-01-31T23:59:59.5+05:30"}],
     [('{"limit":5000,"remaining":‸-1,"reset_at":"2024-06-01T12:00:00Z"}', "remaining negative"),
      ('{"limit":5000,"remaining":1,"reset_at":"2024-06-01‸ 12:00:00Z"}', "date-time with a space for T"),
      ('{"limit":5000,"remaining":1,"reset_at":"2024-06-01T12:00:00‸"}', "date-time without offset")])

case("key_value_pair",
     obj({"key": pat(r"^[a-z_][a-z0-9_]*$"), "value": {"type": ["string", "number", "boolean", "null"]}},
         required="all", additional=False),
     [{"key": "max_tokens", "value": 256}, {"key": "_private", "value": None},
      {"key": "greeting", "value": "héllo"}, {"key": "x1", "value": False}],
     [('{"key":"‸Max","value":1}', "key starts with an upper-case letter"),
      ('{"key":"max‸-tokens","value":1}', "key has a dash"),
      ('{"key":"k","value":‸[1]}', "value is an array"),
      ('{"key":"k","value":‸{}}', "value is an object")])

case("debug_toggle_only",
     obj({"debug": B}, additional=False),
     [{}, {"debug": True}, {"debug": False}],
     [('{"debug":‸"on"}', "debug is a string"),
      ('{"‸verbose":true}', "property not in schema"),
      ('{"debug":true‸,"x":1}', "property not in schema")])

case("api_version_const",
     obj({"version": {"const": 2}, "client": S, "strict": {"const": True}},
         required=["version", "client"], additional=False),
     [{"version": 2, "client": "sdk-python"}, {"version": 2, "client": "", "strict": True}],
     [('{"version":‸3,"client":"x"}', "version must be 2"),
      ('{"version":2,"client":"x","strict":‸false}', "strict must be true"),
      ('{"version":2‸2,"client":"x"}', "version must be 2")])

case("survey_answer",
     obj({"question_id": irange(1), "rating": irange(1, 5), "comment": slen(0, 140), "would_recommend": B},
         required=["question_id", "rating"], additional=False),
     [{"question_id": 1, "rating": 5},
      {"question_id": 42, "rating": 3, "comment": "Ça va 👍", "would_recommend": True},
      {"question_id": 7, "rating": 1, "would_recommend": False}],
     [('{"question_id":1,"rating":‸6}', "rating above 5"),
      ('{"question_id":1,"rating":‸0}', "rating below 1"),
      ('{"question_id":1,"rating":4‸.5}', "rating has a fraction")])

# --- deep nesting --------------------------------------------------------------------------------

_deep = obj({"value": S}, required="all", additional=False)
for _level in ("level5", "level4", "level3", "level2", "level1"):
    _deep = obj({_level: _deep}, required="all", additional=False)
case("deep_five_levels",
     _deep,
     [{"level1": {"level2": {"level3": {"level4": {"level5": {"value": "deep"}}}}}},
      {"level1": {"level2": {"level3": {"level4": {"level5": {"value": "深い 🎉"}}}}}}],
     [('{"level1":{"level2":{"level3":{"level4":{"level5":{"value":‸42}}}}}}', "value is a number"),
      ('{"level1":{"level2":{"level3":{"level4":{‸}}}}}', "level5 missing"),
      ('{"level1":{"level2":{"level3":{"level‸5":{"value":"x"}}}}}', "level4 skipped")])

case("app_config_nested",
     obj({"app": obj({
         "name": S,
         "server": obj({
             "http": obj({"host": S, "port": irange(1, 65535)}, required="all", additional=False),
             "tls": obj({"enabled": B,
                         "cert": obj({"path": S, "expires": fmt("date")}, required=["path"], additional=False)},
                        required=["enabled"], additional=False),
         }, required=["http"], additional=False),
         "logging": obj({"level": enum("debug", "info", "warn", "error")}, required="all", additional=False),
     }, required=["name", "server"], additional=False)}, required="all", additional=False),
     [{"app": {"name": "gannet", "server": {"http": {"host": "0.0.0.0", "port": 8080}}}},
      {"app": {"name": "api", "server": {"http": {"host": "localhost", "port": 443},
                                         "tls": {"enabled": True, "cert": {"path": "/etc/ssl/cert.pem",
                                                                           "expires": "2026-03-31"}}},
               "logging": {"level": "warn"}}},
      {"app": {"name": "x", "server": {"http": {"host": "h", "port": 1}, "tls": {"enabled": False}},
               "logging": {"level": "debug"}}}],
     [('{"app":{"name":"a","server":{"http":{"host":"h","port":6553‸6}}}}', "port above 65535"),
      ('{"app":{"name":"a","server":{"http":{"host":"h","port":80},"tls":{"enabled":true,"cert":{"path":"p","expires":"2026-02-‸32"}}}}}',
       "day 32"),
      ('{"app":{"name":"a","server":{"http":{"host":"h","port":80}},"logging":{"level":"‸verbose"}}}', "level not in enum"),
      ('{"app":{"name":"a","server":{"http":{"host":"h","port":80},"tls":{"‸cert":{"path":"p"}}}}}', "tls.enabled missing")])

case("nested_3d_matrix",
     obj({"matrix": arr(arr(arr(I)))}, required="all", additional=False),
     [{"matrix": []}, {"matrix": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]}, {"matrix": [[[]], [[-1]]]}],
     [('{"matrix":[[[1,2],[3,‸"4"]]]}', "a string in the matrix"),
      ('{"matrix":[[‸1,2]]}', "numbers one level too high"),
      ('{"matrix":[[[1,2‸.5]]]}', "a non-integer")])

case("company_directory",
     obj({"company": obj({
         "name": S,
         "headquarters": obj({"address": obj({
             "street": S, "city": S,
             "geo": obj({"lat": N, "lon": N}, required="all", additional=False)},
             required=["street", "city"], additional=False)}, required="all", additional=False),
         "departments": arr(obj({"name": S,
                                 "head": obj({"name": S, "email": fmt("email")}, required="all", additional=False)},
                                required=["name"], additional=False), maxItems=3),
     }, required=["name", "headquarters"], additional=False)}, required="all", additional=False),
     [{"company": {"name": "Acme", "headquarters": {"address": {"street": "1 Main St", "city": "Springfield"}}}},
      {"company": {"name": "Müller GmbH",
                   "headquarters": {"address": {"street": "Königstraße 5", "city": "Stuttgart",
                                                "geo": {"lat": 48.78, "lon": 9.18}}},
                   "departments": [{"name": "R&D", "head": {"name": "Jana", "email": "jana@mueller.de"}},
                                   {"name": "Sales"}]}}],
     [('{"company":{"name":"Müller","headquarters":{"address":{"street":"Königstraße 5","city":"c","geo":{"lat":‸"48","lon":9}}}}}',
       "lat is a string"),
      ('{"company":{"name":"A","headquarters":{"address":{"street":"s","city":"c"}},"departments":[{"name":"D","head":{"name":"X"‸}}]}}',
       "head.email missing"),
      ('{"company":{"name":"A","headquarters":{"address":{"street":"s","city":"c"}},"departments":[{"name":"a"},{"name":"b"},{"name":"c"}‸,{"name":"d"}]}}',
       "more than 3 departments")])

case("k8s_deployment",
     obj({
         "apiVersion": {"const": "apps/v1"},
         "kind": {"const": "Deployment"},
         "metadata": obj({"name": pat(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
                          "labels": {"type": "object", "additionalProperties": S}},
                         required=["name"], additional=False),
         "spec": obj({
             "replicas": irange(0, 100),
             "template": obj({"spec": obj({"containers": arr(obj({
                 "name": S, "image": S,
                 "ports": arr(obj({"containerPort": irange(1, 65535), "protocol": enum("TCP", "UDP")},
                                  required=["containerPort"], additional=False))},
                 required=["name", "image"], additional=False), minItems=1)},
                 required="all", additional=False)}, required="all", additional=False)},
             required=["template"], additional=False)},
         required="all", additional=False),
     [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
       "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}}},
      {"apiVersion": "apps/v1", "kind": "Deployment",
       "metadata": {"name": "api-server", "labels": {"app": "api", "tier": "backend"}},
       "spec": {"replicas": 3, "template": {"spec": {"containers": [
           {"name": "api", "image": "ghcr.io/acme/api:2.1.0",
            "ports": [{"containerPort": 8080, "protocol": "TCP"}, {"containerPort": 9090}]}]}}}}],
     [('{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"‸Web"},"spec":{"template":{"spec":{"containers":[{"name":"n","image":"i"}]}}}}',
       "upper-case name"),
      ('{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"template":{"spec":{"containers":[‸]}}}}',
       "no containers"),
      ('{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"template":{"spec":{"containers":[{"name":"n","image":"i","ports":[{"containerPort":53,"protocol":"‸SCTP"}]}]}}}}',
       "protocol not in enum"),
      ('{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","labels":{"app":‸1}},"spec":{"template":{"spec":{"containers":[{"name":"n","image":"i"}]}}}}',
       "label value is a number")])

case("orders_lines_options_nested",
     obj({"orders": arr(obj({
         "id": I,
         "lines": arr(obj({
             "sku": S,
             "options": arr(obj({"name": S, "values": arr(S, maxItems=3)}, required="all", additional=False))},
             required=["sku"], additional=False))},
         required="all", additional=False))}, required="all", additional=False),
     [{"orders": []},
      {"orders": [{"id": 1, "lines": [{"sku": "A1", "options": [{"name": "size", "values": ["S", "M"]},
                                                               {"name": "color", "values": ["rouge"]}]}]},
                  {"id": 2, "lines": []}]}],
     [('{"orders":[{"id":1,"lines":[{"sku":"A","options":[{"name":"n","values":["a","b","c"‸,"d"]}]}]}]}',
       "more than 3 values"),
      ('{"orders":[{"id":1,"lines":[{"sku":"A","options":[{"name":"n"‸}]}]}]}', "option values missing"),
      ('{"orders":[{"id":1‸}]}', "order lines missing")])

# --- arrays and tuples ---------------------------------------------------------------------------

case("tags_bounded",
     obj({"tags": arr(S, minItems=1, maxItems=3)}, required="all", additional=False),
     [{"tags": ["a"]}, {"tags": ["x", "y", "z"]}, {"tags": ["日本", "🎉"]}],
     [('{"tags":[‸]}', "fewer than 1 item"),
      ('{"tags":["日本","🎉","c"‸,"d"]}', "more than 3 items"),
      ('{"tags":["a",‸1]}', "item is a number")])

case("int_array_top_level",
     arr(I, maxItems=5),
     [[], [1, 2, 3], [-1, 0, 1, 2, 3]],
     [('[1,2,‸"3"]', "item is a string"),
      ('[1,2,3,4,5‸,6]', "more than 5 items"),
      ('[1‸.5]', "item has a fraction"),
      ('‸{}', "an object, not an array")])

case("people_list",
     obj({"people": arr(obj({"name": S, "age": irange(0)}, required="all", additional=False))},
         required="all", additional=False),
     [{"people": []}, {"people": [{"name": "A", "age": 1}, {"name": "Søren", "age": 88}]}],
     [('{"people":[{"name":"Søren","age":1},{"name":"Ærø"‸}]}', "second person lacks age"),
      ('{"people":[{"name":"A","age":‸-1}]}', "negative age"),
      ('{"people":‸{"name":"A","age":1}}', "an object, not an array")])

case("tuple_point_3d",
     {"type": "array", "prefixItems": [N, N, N], "items": False},
     [[1, 2, 3], [0.5, -1.25, 1e16], [0, 0, 2.5e-05]],
     [('[1,2,3‸,4]', "a fourth coordinate"),
      ('[1,‸"2",3]', "a string coordinate"),
      ('[1,2,‸null]', "null coordinate")])

case("tuple_mixed_record",
     obj({"record": {"type": "array", "prefixItems": [S, I, B], "items": False}}, required="all", additional=False),
     [{"record": ["a", 1, True]}, {"record": ["ñandú", -7, False]}],
     [('{"record":[‸1,"a",true]}', "first item must be a string"),
      ('{"record":["a",1,true‸,null]}', "extra item"),
      ('{"record":["a",1,‸"true"]}', "third item must be a boolean")])

case("command_with_args",
     {"type": "array", "prefixItems": [enum("ls", "cp", "mv")], "items": S},
     [["ls"], ["cp", "a.txt", "b.txt"], ["mv", "old name", "new name"]],
     [('["‸rm","x"]', "command not in enum"),
      ('["cp",‸3]', "argument is a number"),
      ('["ls","-l",‸null]', "argument is null")])

case("tuple_prefixes_open_length",
     {"type": "array", "prefixItems": [I, S, B], "items": False},
     [[], [554413996], [1, "ab"], [-3, "", False]],
     [('[1,"ab",true‸,null]', "a fourth item"),
      ('[‸"ab"]', "first item must be an integer"),
      ('[1,‸2]', "second item must be a string")])

case("tuple_bounded_with_rest",
     {"type": "array", "prefixItems": [S, I], "items": B, "minItems": 1, "maxItems": 4},
     [["a"], ["a", 1], ["a", 1, True], ["a", 1, True, False]],
     [('[‸]', "fewer than minItems"),
      ('["a",1,true,false‸,true]', "more than maxItems"),
      ('["a",1,‸2]', "items past the prefix are booleans")])

case("timestamps_lower_case",
     obj({"at": fmt("date-time"), "clock": fmt("time")}, required="all", additional=False),
     [{"at": "2024-06-01t12:00:00z", "clock": "08:15:00z"}, {"at": "1999-12-31T23:59:59.999+01:00", "clock": "00:00:00Z"}],
     [('{"at":"2024-06-01‸ 12:00:00z","clock":"08:15:00z"}', "a space for T"),
      ('{"at":"2024-06-01t12:00:00z","clock":"08:15:00‸x"}', "x is no offset")])

case("email_rfc5321_local_parts",
     obj({"to": fmt("email")}, required="all", additional=False),
     [{"to": "o'brien+t!#$%&*/=?^_`{|}~-@example.ie"}, {"to": '"john doe"@example.com'},
      {"to": "root@localhost"}, {"to": "ops@[192.0.2.1]"}],
     [('{"to":"john‸ doe"}', "a space outside quotes"),
      ('{"to":"ops.example.com‸"}', "no @")])

case("geojson_point",
     obj({"type": {"const": "Point"},
          "coordinates": {"type": "array", "prefixItems": [N, N], "items": False}}, required="all", additional=False),
     [{"type": "Point", "coordinates": [2.35, 48.85]}, {"type": "Point", "coordinates": [-122.4194, 37.7749]}],
     [('{"type":"Po‸lygon","coordinates":[1,2]}', "type must be Point"),
      ('{"type":"Point","coordinates":[1,2‸,3]}', "three coordinates"),
      ('{"type":"Point","coordinates":‸"1,2"}', "coordinates is a string")])

case("team_roster_bounded",
     arr(obj({"player": S, "number": irange(0, 99)}, required="all", additional=False), minItems=2, maxItems=4),
     [[{"player": "Ana", "number": 10}, {"player": "Ben", "number": 7}],
      [{"player": "A", "number": 0}, {"player": "B", "number": 1}, {"player": "C", "number": 99},
       {"player": "D", "number": 23}]],
     [('[{"player":"Ana","number":10}‸]', "fewer than 2 players"),
      ('[{"player":"A","number":1},{"player":"B","number":10‸0}]', "number above 99"),
      ('[{"player":"A","number":1},{"player":"B","number":2},{"player":"C","number":3},{"player":"D","number":4}‸,{"player":"E","number":5}]',
       "more than 4 players")])

case("weekdays_enum_array",
     obj({"days": arr(enum("mon", "tue", "wed", "thu", "fri", "sat", "sun"), maxItems=7)},
         required="all", additional=False),
     [{"days": []}, {"days": ["mon", "wed", "fri"]}, {"days": ["sat", "sun"]}],
     [('{"days":["mon","tue‸s"]}', "not a day name"),
      ('{"days":["‸Monday"]}', "capitalised day name"),
      ('{"days":["mon",‸1]}', "a number")])

case("tic_tac_toe_board",
     obj({"board": arr(arr(enum("X", "O", None), minItems=3, maxItems=3), minItems=3, maxItems=3),
          "next": enum("X", "O")}, required="all", additional=False),
     [{"board": [["X", "O", None], [None, "X", None], ["O", None, None]], "next": "O"},
      {"board": [[None, None, None], [None, None, None], [None, None, None]], "next": "X"}],
     [('{"board":[["X","O",null],["X",null‸],["O","O","X"]],"next":"X"}', "a row of 2 cells"),
      ('{"board":[["X","O","‸Z"],["X",null,null],["O","O","X"]],"next":"X"}', "cell not X, O or null"),
      ('{"board":[["X","O",null],["X",null,null],["O","O","X"]‸,["X","X","X"]],"next":"X"}', "4 rows"),
      ('{"board":[["X","O",null],["X",null,null],["O","O","X"]],"next":‸null}', "next is null")])

case("time_series_pairs",
     obj({"metric": S, "points": arr({"type": "array", "prefixItems": [I, N], "items": False}, maxItems=3)},
         required="all", additional=False),
     [{"metric": "cpu", "points": [[1700000000, 0.25], [1700000060, 0.5]]}, {"metric": "mem", "points": []}],
     [('{"metric":"cpu","points":[[1700000000‸.5,0.25]]}', "timestamp has a fraction"),
      ('{"metric":"cpu","points":[[1,0.1‸,2]]}', "point with 3 items"),
      ('{"metric":"cpu","points":[[1,1],[2,2],[3,3]‸,[4,4]]}', "more than 3 points")])

case("nullable_string_list",
     arr({"type": ["string", "null"]}, minItems=1),
     [["a"], [None], ["x", None, "ÿ"]],
     [('[‸]', "empty list"),
      ('["a",‸true]', "boolean item"),
      ('[null,‸0]', "number item")])

# --- enum and const ------------------------------------------------------------------------------

case("account_status_enum",
     obj({"status": enum("pending", "active", "suspended", "deleted")}, required="all", additional=False),
     [{"status": "pending"}, {"status": "deleted"}, {"status": "active"}],
     [('{"status":"activ‸"}', "truncated enum value"),
      ('{"status":"‸Active"}', "wrong case"),
      ('{"status":‸null}', "null status")])

case("fibonacci_priority",
     obj({"priority": {"type": "integer", "enum": [1, 2, 3, 5, 8]}}, required="all", additional=False),
     [{"priority": 1}, {"priority": 8}, {"priority": 5}],
     [('{"priority":‸4}', "4 not allowed"),
      ('{"priority":1‸3}', "13 not allowed"),
      ('{"priority":‸"1"}', "a string")])

case("mixed_enum_setting",
     obj({"setting": enum("auto", 0, 1.5, True, None)}, required="all", additional=False),
     [{"setting": "auto"}, {"setting": 0}, {"setting": 1.5}, {"setting": None}],
     [('{"setting":‸false}', "false not allowed"),
      ('{"setting":"‸manual"}', "string not allowed"),
      ('{"setting":1‸}', "1 is not 1.5"),
      ('{"setting":0‸.5}', "0.5 not allowed")])

case("enum_filtered_by_type",
     obj({"mode": {"type": "string", "enum": ["fast", "safe", 1]}}, required="all", additional=False),
     [{"mode": "fast"}, {"mode": "safe"}],
     [('{"mode":‸1}', "1 is in the enum but not a string"),
      ('{"mode":"fas‸"}', "truncated value")])

case("size_nullable_enum",
     obj({"size": {"type": ["string", "null"], "enum": ["small", "medium", "large", None]}},
         required="all", additional=False),
     [{"size": "small"}, {"size": None}, {"size": "large"}],
     [('{"size":"‸huge"}', "not a size"),
      ('{"size":"med‸"}', "truncated value"),
      ('{"size":‸0}', "a number")])

case("event_envelope_const",
     obj({"kind": {"const": "event"}, "payload": S, "version": {"const": 1}}, required="all", additional=False),
     [{"kind": "event", "payload": "{\"a\":1}", "version": 1}, {"kind": "event", "payload": "", "version": 1}],
     [('{"kind":"‸message","payload":"x","version":1}', "kind must be event"),
      ('{"kind":"event","payload":"x","version":‸2}', "version must be 1"),
      ('{"kind":"event","‸version":1}', "payload missing")])

case("language_enum_unicode",
     obj({"lang": enum("日本語", "English", "Français", "Español")}, required="all", additional=False),
     [{"lang": "日本語"}, {"lang": "Français"}, {"lang": "Español"}],
     [('{"lang":"Fran‸cais"}', "missing cedilla"),
      ('{"lang":"日本‸"}', "truncated value"),
      ('{"lang":"‸Deutsch"}', "not in the enum")])

case("compass_direction_top",
     enum("north", "south", "east", "west"),
     ["north", "west"],
     [('"nort‸"', "truncated"), ('"‸up"', "not a direction"), ('‸1', "a number")])

case("top_enum_number_prefixes",
     enum(10, 100, 1000),
     [10, 100, 1000],
     [('1', "1 only starts 10, 100 and 1000"),
      ('100‸1', "1001 not allowed"),
      ('10‸5', "105 not allowed")])

case("const_array_value",
     obj({"axes": {"const": ["x", "y"]}, "values": arr(N, maxItems=2)}, required="all", additional=False),
     [{"axes": ["x", "y"], "values": [1, 2]}, {"axes": ["x", "y"], "values": []}],
     [('{"axes":["‸y","x"],"values":[]}', "axes in the wrong order"),
      ('{"axes":["x"‸],"values":[]}', "axes too short"),
      ('{"axes":["x","y"],"values":[1,2‸,3]}', "more than 2 values")])

case("risk_assessment_enum_defs",
     {"$defs": {"level": enum("low", "medium", "high", "critical")},
      **obj({"severity": {"$ref": "#/$defs/level"}, "impact": {"$ref": "#/$defs/level"},
             "history": arr({"$ref": "#/$defs/level"}, maxItems=3)}, required=["severity", "impact"], additional=False)},
     [{"severity": "low", "impact": "critical"},
      {"severity": "high", "impact": "medium", "history": ["low", "medium", "high"]}],
     [('{"severity":"‸severe","impact":"low"}', "not a level"),
      ('{"severity":"low","impact":"low","history":["low","low","low"‸,"low"]}', "history longer than 3"),
      ('{"severity":"low"‸}', "impact missing")])

# --- anyOf / oneOf / allOf -----------------------------------------------------------------------

case("id_string_or_positive_int",
     obj({"id": {"anyOf": [slen(1), irange(1)]}}, required="all", additional=False),
     [{"id": "abc"}, {"id": 42}, {"id": "🎉"}],
     [('{"id":‸true}', "a boolean"),
      ('{"id":‸0}', "0 is not positive"),
      ('{"id":"‸"}', "empty string")])

case("shape_oneof",
     {"oneOf": [
         obj({"kind": {"const": "circle"}, "radius": N}, required="all", additional=False),
         obj({"kind": {"const": "rect"}, "width": N, "height": N}, required="all", additional=False),
         obj({"kind": {"const": "triangle"}, "sides": {"type": "array", "prefixItems": [N, N, N], "items": False}},
             required="all", additional=False)]},
     [{"kind": "circle", "radius": 1.5}, {"kind": "rect", "width": 2, "height": 3},
      {"kind": "triangle", "sides": [3, 4, 5]}],
     [('{"kind":"‸hexagon","sides":6}', "unknown kind"),
      ('{"kind":"circle","‸width":2,"height":3}', "circle with rect fields"),
      ('{"kind":"rect","width":2‸}', "height missing"),
      ('{"kind":"triangle","sides":[3,4,5‸,6]}', "four sides")])

case("payment_method_anyof",
     obj({"amount_cents": irange(1), "method": {"anyOf": [
         obj({"type": {"const": "card"}, "number": pat(r"^\d{16}$"), "expiry": pat(r"^(0[1-9]|1[0-2])/\d{2}$")},
             required="all", additional=False),
         obj({"type": {"const": "paypal"}, "email": fmt("email")}, required="all", additional=False),
         obj({"type": {"const": "bank_transfer"}, "iban": pat(r"^[A-Z]{2}\d{2}[A-Z0-9]{10,30}$")},
             required="all", additional=False)]}}, required="all", additional=False),
     [{"amount_cents": 1999, "method": {"type": "card", "number": "4111111111111111", "expiry": "04/27"}},
      {"amount_cents": 500, "method": {"type": "paypal", "email": "buyer@example.com"}},
      {"amount_cents": 1, "method": {"type": "bank_transfer", "iban": "DE89370400440532013000"}}],
     [('{"amount_cents":1999,"method":{"type":"card","number":"411111111111111‸","expiry":"04/27"}}', "15-digit card"),
      ('{"amount_cents":1999,"method":{"type":"card","number":"4111111111111111","expiry":"1‸3/27"}}', "month 13"),
      ('{"amount_cents":500,"method":{"type":"pay‸_pal","email":"a@b.co"}}', "unknown method type"),
      ('{"amount_cents":‸0,"method":{"type":"paypal","email":"a@b.co"}}', "amount below 1")])

case("small_int_or_char_top",
     {"anyOf": [irange(0, 9), slen(1, 1)]},
     [7, "x", "é", 0],
     [('1‸0', "10 is above 9"), ('"a‸b"', "two characters"), ('‸-1', "negative")])

case("ui_events_oneof",
     obj({"events": arr({"oneOf": [
         obj({"type": {"const": "click"}, "x": irange(0), "y": irange(0)}, required="all", additional=False),
         obj({"type": {"const": "keypress"}, "key": slen(1, 1), "shift": B}, required=["type", "key"], additional=False),
         obj({"type": {"const": "scroll"}, "dy": I}, required="all", additional=False)]})},
         required="all", additional=False),
     [{"events": [{"type": "click", "x": 10, "y": 20}, {"type": "keypress", "key": "a"},
                  {"type": "scroll", "dy": -120}]},
      {"events": [{"type": "keypress", "key": "Z", "shift": True}]},
      {"events": []}],
     [('{"events":[{"type":"click","x":10,"y":‸-5}]}', "negative y"),
      ('{"events":[{"type":"keypress","key":"a‸b"}]}', "key longer than 1"),
      ('{"events":[{"type":"scroll","dy":1‸.5}]}', "dy has a fraction"),
      ('{"events":[{"type":"‸hover"}]}', "unknown event type")])

case("chat_content_blocks_anyof",
     obj({"role": enum("user", "assistant"), "content": arr({"anyOf": [
         obj({"type": {"const": "text"}, "text": S}, required="all", additional=False),
         obj({"type": {"const": "image"}, "url": pat(r"^https://"), "alt": S}, required=["type", "url"], additional=False)]},
         minItems=1)}, required="all", additional=False),
     [{"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                   {"type": "image", "url": "https://example.com/cat.png"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "A cat 🐱 on a sofa."}]}],
     [('{"role":"user","content":[{"type":"image","url":"http‸://example.com/a.png"}]}', "http, not https"),
      ('{"role":"‸system","content":[{"type":"text","text":"x"}]}', "role not in enum"),
      ('{"role":"user","content":[‸]}', "no content blocks")])

case("allof_single_ref_money",
     {"$defs": {"money": obj({"amount": N, "currency": pat(r"^[A-Z]{3}$")}, required="all", additional=False)},
      "type": "object",
      "properties": {"price": {"allOf": [{"$ref": "#/$defs/money"}], "description": "Unit price"},
                     "discount": {"allOf": [{"$ref": "#/$defs/money"}]}},
      "required": ["price"], "additionalProperties": False},
     [{"price": {"amount": 9.99, "currency": "EUR"}},
      {"price": {"amount": 100, "currency": "JPY"}, "discount": {"amount": 10, "currency": "JPY"}}],
     [('{"price":{"amount":9.99,"currency":"‸eur"}}', "lower-case currency"),
      ('{"price":{"amount":9.99,"currency":"EUR‸O"}}', "4-letter currency"),
      ('{"price":{"amount":‸"9.99","currency":"EUR"}}', "amount is a string")])

case("allof_single_inline_top",
     {"title": "Wrapped", "allOf": [obj({"q": S, "limit": irange(1, 50)}, required=["q"], additional=False)]},
     [{"q": "llama"}, {"q": "résumé tips", "limit": 50}],
     [('{"q":"x","limit":5‸1}', "limit above 50"), ('{‸}', "q missing"), ('{"q":‸5}', "q not a string")])

case("measurement_value_anyof",
     obj({"sensor": S, "value": {"anyOf": [N, NULL, pat(r"^N/A$")]}}, required="all", additional=False),
     [{"sensor": "t1", "value": 21.5}, {"sensor": "t2", "value": None}, {"sensor": "t3", "value": "N/A"}],
     [('{"sensor":"t1","value":"N‸A"}', "NA without slash"),
      ('{"sensor":"t1","value":‸true}', "a boolean"),
      ('{"sensor":"t1","value":"N/A‸ "}', "trailing space")])

case("oneof_disjoint_int_ranges_top",
     {"oneOf": [irange(None, -1), irange(10, 20)]},
     [-5, 10, 20, -1000],
     [('‸5', "5 is in neither range"), ('2‸1', "21 above 20"), ('1', "1 only starts 10..19"),
      ('‸0', "0 is in neither range")])

# --- nullable --------------------------------------------------------------------------------------

case("profile_nullable_fields",
     obj({"middle_name": {"type": ["string", "null"]}, "age": {"type": ["integer", "null"], "minimum": 0},
          "verified": {"type": ["boolean", "null"]}}, required="all", additional=False),
     [{"middle_name": None, "age": None, "verified": None}, {"middle_name": "José", "age": 33, "verified": True}],
     [('{"middle_name":null,"age":‸-3,"verified":null}', "negative age"),
      ('{"middle_name":‸0,"age":null,"verified":null}', "middle_name is a number"),
      ('{"middle_name":null,"age":null,"verified":‸"no"}', "verified is a string"),
      ('{"middle_name":null,"age":null‸}', "verified missing")])

case("nullable_manager_object",
     obj({"name": S, "manager": {"type": ["object", "null"], "properties": {"id": I, "name": S},
                                 "required": ["id"], "additionalProperties": False}},
         required="all", additional=False),
     [{"name": "Ann", "manager": None}, {"name": "Bo", "manager": {"id": 1}},
      {"name": "Cy", "manager": {"id": 2, "name": "Ann"}}],
     [('{"name":"Bo","manager":{‸}}', "manager without id"),
      ('{"name":"Bo","manager":‸"Ann"}', "manager is a string"),
      ('{"name":"Bo","manager":{"id":‸null}}', "manager id is null")])

case("nullable_tag_array",
     obj({"tags": {"type": ["array", "null"], "items": S, "maxItems": 2}}, required="all", additional=False),
     [{"tags": None}, {"tags": []}, {"tags": ["a", "b"]}],
     [('{"tags":["a","b"‸,"c"]}', "more than 2 tags"),
      ('{"tags":[‸null]}', "null tag"),
      ('{"tags":‸"a"}', "a string, not a list")])

case("nullable_datetime_anyof",
     obj({"id": fmt("uuid"), "deleted_at": {"anyOf": [fmt("date-time"), NULL]}}, required="all", additional=False),
     [{"id": "123e4567-e89b-12d3-a456-426614174000", "deleted_at": None},
      {"id": "550e8400-e29b-41d4-a716-446655440000", "deleted_at": "2024-02-29T08:30:00-05:00"}],
     [('{"id":"123e4567-e89b-12d3-a456-426614174000","deleted_at":"2024-02-29‸"}', "a date, not a date-time"),
      ('{"id":"123e4567-e89b-12d3-a456-426614174000","deleted_at":‸false}', "a boolean"),
      ('{"id":"123e4567-e89b-12d3-a456-42661417400‸","deleted_at":null}', "uuid too short")])

case("nullable_short_code",
     obj({"code": {"type": ["string", "null"], "maxLength": 3}, "count": {"type": ["integer", "null"]}},
         required=["code"], additional=False),
     [{"code": None}, {"code": "ABC", "count": 3}, {"code": "日本", "count": None}],
     [('{"code":"ABC‸D"}', "code longer than 3"),
      ('{"code":"日本語‸!"}', "code longer than 3"),
      ('{"code":null,"count":‸"3"}', "count is a string")])

# --- recursion -------------------------------------------------------------------------------------

case("recursive_binary_tree",
     {"$defs": {"node": obj({"value": I,
                             "left": {"anyOf": [{"$ref": "#/$defs/node"}, NULL]},
                             "right": {"anyOf": [{"$ref": "#/$defs/node"}, NULL]}},
                            required=["value"], additional=False)},
      "$ref": "#/$defs/node"},
     [{"value": 1},
      {"value": 2, "left": {"value": 1}, "right": {"value": 3, "left": None, "right": {"value": 4}}},
      {"value": 5, "left": {"value": 3, "left": {"value": 2, "left": {"value": 1}}}}],
     [('{"value":2,"left":{"value":1},"right":{‸}}', "right node without value"),
      ('{"value":2,"left":{"value":‸"1"}}', "value is a string"),
      ('{"value":2,"left":{"value":1,"right":{"value":3,"‸middle":{"value":4}}}}', "unknown child")])

case("recursive_linked_list_root_ref",
     obj({"val": S, "next": {"anyOf": [{"$ref": "#"}, NULL]}}, required="all", additional=False),
     [{"val": "a", "next": None}, {"val": "a", "next": {"val": "b", "next": {"val": "c", "next": None}}}],
     [('{"val":"a","next":{"val":"b"‸}}', "inner next missing"),
      ('{"val":"a","next":{"val":‸1,"next":null}}', "val is a number"),
      ('{"val":"a","next":‸[]}', "next is an array")])

case("recursive_comment_thread",
     {"$defs": {"comment": obj({"author": S, "text": slen(1, 200), "votes": I,
                                "replies": arr({"$ref": "#/$defs/comment"})},
                               required=["author", "text"], additional=False)},
      **obj({"post_id": I, "comments": arr({"$ref": "#/$defs/comment"})}, required="all", additional=False)},
     [{"post_id": 1, "comments": []},
      {"post_id": 7, "comments": [
          {"author": "ann", "text": "First!", "votes": 3,
           "replies": [{"author": "bob", "text": "Welcome 👋", "replies": [{"author": "ann", "text": "Thanks"}]}]},
          {"author": "cy", "text": "Nice post"}]}],
     [('{"post_id":7,"comments":[{"author":"ann","text":"x","replies":[{"author":"bob","text":"‸"}]}]}', "empty reply text"),
      ('{"post_id":7,"comments":[{"author":"ann","text":"x","replies":[{"author":"bob"‸}]}]}', "reply text missing"),
      ('{"post_id":7,"comments":[{"author":"ann","text":"x","votes":1‸.5}]}', "votes has a fraction")])

case("recursive_json_value",
     {"$defs": {"json": {"anyOf": [NULL, B, N, S, arr({"$ref": "#/$defs/json"}),
                                   {"type": "object", "additionalProperties": {"$ref": "#/$defs/json"}}]}},
      **obj({"id": I, "data": {"$ref": "#/$defs/json"}}, required="all", additional=False)},
     [{"id": 1, "data": None},
      {"id": 2, "data": {"a": [1, "two", {"three": 3.0}], "b": {"c": {"d": False}}}},
      {"id": 3, "data": [[], {}, "x", -0.5]}],
     [('{"id":‸"1","data":null}', "id is a string"),
      ('{"id":1‸}', "data missing"),
      ('{"id":1,"data":{"clé":"été 🌞"}‸,"extra":1}', "property not in schema")])

case("recursive_filesystem",
     {"$defs": {
         "file": obj({"kind": {"const": "file"}, "name": S, "size": irange(0)}, required="all", additional=False),
         "dir": obj({"kind": {"const": "dir"}, "name": S,
                     "children": arr({"anyOf": [{"$ref": "#/$defs/file"}, {"$ref": "#/$defs/dir"}]})},
                    required="all", additional=False)},
      "$ref": "#/$defs/dir"},
     [{"kind": "dir", "name": "/", "children": []},
      {"kind": "dir", "name": "src", "children": [
          {"kind": "file", "name": "main.cpp", "size": 1024},
          {"kind": "dir", "name": "util", "children": [{"kind": "file", "name": "str.h", "size": 0}]}]}],
     [('{"kind":"dir","name":"src","children":[{"kind":"file","name":"a","size":‸-1}]}', "negative size"),
      ('{"kind":"dir","name":"src","children":[{"kind":"‸link","name":"a"}]}', "unknown kind"),
      ('{"kind":"‸file","name":"a","size":1}', "the root must be a dir"),
      ('{"kind":"dir","name":"src","children":[{"kind":"dir","name":"x"‸}]}', "children missing")])

case("recursive_expression_tuple",
     {"$defs": {"expr": {"anyOf": [
         N,
         obj({"op": enum("+", "-", "*", "/"),
              "args": {"type": "array", "prefixItems": [{"$ref": "#/$defs/expr"}, {"$ref": "#/$defs/expr"}],
                       "items": False}}, required="all", additional=False)]}},
      "$ref": "#/$defs/expr"},
     [42, {"op": "+", "args": [1, 2]}, {"op": "*", "args": [{"op": "-", "args": [5, 3]}, 2.5]}],
     [('{"op":"‸%","args":[1,2]}', "unknown operator"),
      ('{"op":"+","args":[1,2‸,3]}', "three operands"),
      ('{"op":"+","args":[1,‸"2"]}', "operand is a string"),
      ('‸"42"', "a string")])

case("recursive_menu_definitions",
     {"definitions": {"item": obj({"label": slen(1, 30), "action": pat(r"^[a-z]+(\.[a-z]+)*$"),
                                   "submenu": arr({"$ref": "#/definitions/item"}, maxItems=5)},
                                  required=["label"], additional=False)},
      **obj({"menu": arr({"$ref": "#/definitions/item"})}, required="all", additional=False)},
     [{"menu": []},
      {"menu": [{"label": "File", "submenu": [{"label": "Open…", "action": "file.open"},
                                              {"label": "Recent", "submenu": [{"label": "a.txt",
                                                                               "action": "file.open.recent"}]}]},
                {"label": "Help", "action": "help"}]}],
     [('{"menu":[{"label":"File","action":"file.‸.open"}]}', "empty action segment"),
      ('{"menu":[{"label":"x","action":"‸File"}]}', "upper-case action"),
      ('{"menu":[{"label":"‸","action":"a"}]}', "empty label")])

case("recursive_org_chart",
     {"$defs": {"employee": obj({"name": S, "title": S, "reports": arr({"$ref": "#/$defs/employee"}, maxItems=3)},
                                required=["name", "title"], additional=False)},
      "$ref": "#/$defs/employee"},
     [{"name": "Ada", "title": "CEO"},
      {"name": "Ada", "title": "CEO", "reports": [
          {"name": "Bo", "title": "CTO", "reports": [{"name": "Cy", "title": "Engineer"}]},
          {"name": "Di", "title": "CFO", "reports": []}]}],
     [('{"name":"Ada","title":"CEO","reports":[{"name":"a","title":"t"},{"name":"b","title":"t"},{"name":"c","title":"t"}‸,{"name":"d","title":"t"}]}',
       "more than 3 reports"),
      ('{"name":"Ada","‸reports":[]}', "title missing"),
      ('{"name":"Ada","title":"CEO","reports":[{"name":"Bo","title":‸null}]}', "title is null")])

case("recursive_category_with_id",
     {"$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "https://example.com/schemas/category.json",
      "title": "Category",
      **obj({"name": S, "slug": pat(r"^[a-z0-9-]+$"), "subcategories": arr({"$ref": "#"}, maxItems=4)},
            required=["name", "slug"], additional=False)},
     [{"name": "Books", "slug": "books"},
      {"name": "Électronique", "slug": "electronique", "subcategories": [
          {"name": "Téléphones", "slug": "telephones", "subcategories": [{"name": "Android", "slug": "android"}]}]}],
     [('{"name":"Books","slug":"‸Books"}', "upper-case slug"),
      ('{"name":"Books","slug":"books","subcategories":[{"name":"x"‸}]}', "sub-category slug missing"),
      ('{"name":"Books","slug":"sci‸ fi"}', "space in slug")])

case("recursive_nested_lists_top",
     {"$defs": {"nested": {"anyOf": [I, arr({"$ref": "#/$defs/nested"}, maxItems=3)]}},
      "$ref": "#/$defs/nested"},
     [[1, [2, [3, []]]], 5, [[[[]]]]],
     [('[1,[2,‸"3"]]', "a string"),
      ('[1,2,3‸,4]', "more than 3 items"),
      ('[[1‸.5]]', "a fraction")])

# --- $defs reuse -----------------------------------------------------------------------------------

case("defs_address_reuse",
     {"$defs": {"address": obj({"street": S, "city": S, "postal_code": pat(r"^\d{5}(-\d{4})?$"),
                                "country": pat(r"^[A-Z]{2}$")}, required="all", additional=False)},
      **obj({"billing": {"$ref": "#/$defs/address"}, "shipping": {"$ref": "#/$defs/address"},
             "same_as_billing": B}, required=["billing"], additional=False)},
     [{"billing": {"street": "1 Main St", "city": "Springfield", "postal_code": "12345", "country": "US"}},
      {"billing": {"street": "1 Main St", "city": "Springfield", "postal_code": "12345", "country": "US"},
       "shipping": {"street": "2 Elm St", "city": "Shelbyville", "postal_code": "54321-1234", "country": "US"},
       "same_as_billing": False}],
     [('{"billing":{"street":"s","city":"c","postal_code":"12345","country":"US"},"shipping":{"street":"s","city":"c","postal_code":"1234‸","country":"US"}}',
       "4-digit postal code"),
      ('{"billing":{"street":"s","city":"c","postal_code":"12345","country":"‸us"}}', "lower-case country"),
      ('{"billing":{"street":"s","city":"c","postal_code":"12345"‸}}', "country missing")])

case("defs_chained_money_lines",
     {"$defs": {"currency": enum("USD", "EUR", "GBP", "JPY"),
                "money": obj({"amount": N, "currency": {"$ref": "#/$defs/currency"}}, required="all", additional=False),
                "line": obj({"description": S, "quantity": irange(1), "unit_price": {"$ref": "#/$defs/money"}},
                            required="all", additional=False)},
      **obj({"lines": arr({"$ref": "#/$defs/line"}, minItems=1), "total": {"$ref": "#/$defs/money"}},
            required="all", additional=False)},
     [{"lines": [{"description": "Widget", "quantity": 2, "unit_price": {"amount": 9.5, "currency": "USD"}}],
       "total": {"amount": 19, "currency": "USD"}},
      {"lines": [{"description": "Ramen", "quantity": 1, "unit_price": {"amount": 900, "currency": "JPY"}},
                 {"description": "Gyoza", "quantity": 3, "unit_price": {"amount": 450, "currency": "JPY"}}],
       "total": {"amount": 2250, "currency": "JPY"}}],
     [('{"lines":[{"description":"W","quantity":‸0,"unit_price":{"amount":1,"currency":"USD"}}],"total":{"amount":0,"currency":"USD"}}',
       "quantity below 1"),
      ('{"lines":[{"description":"W","quantity":1,"unit_price":{"amount":1,"currency":"‸usd"}}],"total":{"amount":1,"currency":"USD"}}',
       "lower-case currency"),
      ('{"lines":[‸],"total":{"amount":0,"currency":"EUR"}}', "no lines")])

case("definitions_line_segment",
     {"definitions": {"point": obj({"x": N, "y": N}, required="all", additional=False),
                      "color": pat(r"^#[0-9a-fA-F]{6}$")},
      **obj({"start": {"$ref": "#/definitions/point"}, "end": {"$ref": "#/definitions/point"},
             "stroke": {"$ref": "#/definitions/color"}, "width": irange(1, 10)},
            required=["start", "end"], additional=False)},
     [{"start": {"x": 0, "y": 0}, "end": {"x": 10.5, "y": -3}},
      {"start": {"x": 1, "y": 1}, "end": {"x": 2, "y": 2}, "stroke": "#FF8800", "width": 3}],
     [('{"start":{"x":1,"y":1},"end":{"x":2,"y":2},"stroke":"#FF880‸G"}', "G is not hex"),
      ('{"start":{"x":1,"y":1},"end":{"x":2,"y":2},"width":1‸1}', "width above 10"),
      ('{"start":{"x":1‸},"end":{"x":2,"y":2}}', "start.y missing")])

case("defs_shared_person_roles",
     {"$defs": {"person": obj({"name": slen(1, 40), "email": fmt("email")}, required=["name"], additional=False)},
      **obj({"owner": {"$ref": "#/$defs/person"}, "maintainers": arr({"$ref": "#/$defs/person"}, maxItems=3),
             "reviewer": {"anyOf": [{"$ref": "#/$defs/person"}, NULL]}}, required=["owner"], additional=False)},
     [{"owner": {"name": "Grace"}},
      {"owner": {"name": "Grace", "email": "grace@navy.mil"}, "maintainers": [{"name": "Linus"}], "reviewer": None},
      {"owner": {"name": "Ο Γιώργος"}, "reviewer": {"name": "Ana", "email": "ana@example.pt"}}],
     [('{"owner":{"name":"‸"}}', "empty name"),
      ('{"owner":{"name":"Ο Γιώργος"},"reviewer":{"name":"A","email":"ana‸"}}', "email without @"),
      ('{"owner":{"name":"G"},"maintainers":[{"‸email":"a@b.co"}]}', "maintainer name missing")])

# --- patterns --------------------------------------------------------------------------------------

case("pattern_us_phone",
     obj({"phone": pat(r"^\(\d{3}\) \d{3}-\d{4}$"), "ext": pat(r"^\d{1,5}$")}, required=["phone"], additional=False),
     [{"phone": "(555) 123-4567"}, {"phone": "(212) 555-0000", "ext": "42"}],
     [('{"phone":"‸555-123-4567"}', "no parentheses"),
      ('{"phone":"(555) 123-456‸"}', "too few digits"),
      ('{"phone":"(555)‸123-4567"}', "missing space"),
      ('{"phone":"(555) 123-4567","ext":"12345‸6"}', "extension longer than 5")])

case("pattern_sku",
     obj({"sku": pat(r"^[A-Z]{3}-\d{4}$"), "qty": irange(1, 999)}, required="all", additional=False),
     [{"sku": "ABC-1234", "qty": 1}, {"sku": "XYZ-0001", "qty": 999}],
     [('{"sku":"AB‸1-1234","qty":1}', "digit in the letter part"),
      ('{"sku":"ABC-123‸","qty":1}', "3 digits"),
      ('{"sku":"ABC-1234‸5","qty":1}', "5 digits"),
      ('{"sku":"ABC-1234","qty":100‸0}', "qty above 999")])

case("pattern_hex_palette",
     obj({"name": S, "colors": arr(pat(r"^#[0-9a-fA-F]{6}$"), minItems=1, maxItems=4)}, required="all", additional=False),
     [{"name": "sunset", "colors": ["#FF5733", "#ffc300"]}, {"name": "mono", "colors": ["#000000"]}],
     [('{"name":"x","colors":["#FF573‸G"]}', "G is not hex"),
      ('{"name":"x","colors":["‸FF5733"]}', "missing #"),
      ('{"name":"x","colors":["#FFF‸"]}', "3-digit hex")])

case("pattern_semver_package",
     obj({"name": pat(r"^(@[a-z0-9-]+/)?[a-z0-9-]+$"), "version": pat(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")},
         required="all", additional=False),
     [{"name": "left-pad", "version": "1.3.0"}, {"name": "@acme/utils", "version": "2.0.0-beta.1"},
      {"name": "x", "version": "10.20.30"}],
     [('{"name":"left-pad","version":"1.3‸"}', "missing patch"),
      ('{"name":"left-pad","version":"‸v1.0.0"}', "leading v"),
      ('{"name":"‸LeftPad","version":"1.0.0"}', "upper-case name"),
      ('{"name":"x","version":"1.0.0-‸"}', "empty pre-release")])

case("pattern_unanchored_contains",
     obj({"password_hint": pat(r"\d"), "label": pat(r"[A-Z]")}, required="all", additional=False),
     [{"password_hint": "abc1", "label": "Hello"}, {"password_hint": "9", "label": "lowerX"},
      {"password_hint": "año 2024", "label": "Zürich"}],
     [('{"password_hint":"abc‸","label":"A"}', "no digit"),
      ('{"password_hint":"1","label":"lower‸"}', "no upper-case letter"),
      ('{"password_hint":‸1,"label":"A"}', "a number")])

case("pattern_url_prefix",
     obj({"homepage": pat(r"^https?://"), "repo": pat(r"^git@github\.com:[\w.-]+/[\w.-]+\.git$")},
         required=["homepage"], additional=False),
     [{"homepage": "https://example.com"},
      {"homepage": "http://localhost:8080/docs", "repo": "git@github.com:acme/gannet.git"}],
     [('{"homepage":"‸ftp://example.com"}', "ftp URL"),
      ('{"homepage":"https:/‸example.com"}', "one slash"),
      ('{"homepage":"http://x","repo":"git@github.com:acme/gannet‸"}', "repo without .git")])

case("pattern_suffix_anchor_domain",
     obj({"work_email": pat(r"@example\.com$")}, required="all", additional=False),
     [{"work_email": "alice@example.com"}, {"work_email": "bob.smith+tag@example.com"}],
     [('{"work_email":"alice@example.org‸"}', "wrong domain"),
      ('{"work_email":"alice‸"}', "no domain"),
      ('{"work_email":‸null}', "null")])

case("pattern_slug_title",
     obj({"slug": pat(r"^[a-z0-9]+(-[a-z0-9]+)*$"), "title": slen(1, 80)}, required="all", additional=False),
     [{"slug": "hello-world", "title": "Hello, World!"}, {"slug": "2024-recap", "title": "Rétrospective 2024"}],
     [('{"slug":"hello-‸-world","title":"x"}', "double dash"),
      ('{"slug":"hello-‸","title":"x"}', "trailing dash"),
      ('{"slug":"‸Hello","title":"x"}', "upper-case slug"),
      ('{"slug":"a","title":"‸"}', "empty title")])

case("pattern_zip_and_state",
     obj({"zip": pat(r"^\d{5}(-\d{4})?$"), "state": pat(r"^(AL|AK|AZ|CA|CO|NY|TX|WA)$")},
         required="all", additional=False),
     [{"zip": "94105", "state": "CA"}, {"zip": "10001-1234", "state": "NY"}],
     [('{"zip":"9410‸","state":"CA"}', "4-digit zip"),
      ('{"zip":"94105-12‸","state":"CA"}', "short zip+4"),
      ('{"zip":"94105","state":"C‸Z"}', "unknown state"),
      ('{"zip":"94105","state":"‸ca"}', "lower-case state")])

case("pattern_ipv4_hosts_top",
     arr(pat(r"^(\d{1,3}\.){3}\d{1,3}$"), minItems=1, maxItems=3),
     [["127.0.0.1"], ["10.0.0.1", "192.168.1.254"]],
     [('["10.0.0‸"]', "three octets"),
      ('["10.0.0.123‸4"]', "4-digit octet"),
      ('["10.0.‸a.1"]', "letter in an octet"),
      ('[‸]', "no hosts")])

case("pattern_username_handle",
     obj({"handle": pat(r"^@?[a-zA-Z_][a-zA-Z0-9_]{2,14}$"), "display": slen(1, 30)},
         required=["handle"], additional=False),
     [{"handle": "@jack"}, {"handle": "snake_case_123", "display": "Sñake 🐍"}],
     [('{"handle":"@‸1abc"}', "starts with a digit"),
      ('{"handle":"ab‸"}', "too short"),
      ('{"handle":"abcdefghijklmno‸p"}', "too long")])

case("pattern_alarm_hhmm",
     obj({"alarms": arr(pat(r"^([01]\d|2[0-3]):[0-5]\d$"), maxItems=3), "label": S}, required=["alarms"], additional=False),
     [{"alarms": ["07:30", "23:59"]}, {"alarms": [], "label": "none"}],
     [('{"alarms":["2‸4:00"]}', "hour 24"),
      ('{"alarms":["07:‸60"]}', "minute 60"),
      ('{"alarms":["‸7:30"]}', "single-digit hour")])

case("pattern_color_keyword",
     obj({"color": pat(r"^(red|green|blue)(-(light|dark))?$")}, required="all", additional=False),
     [{"color": "red"}, {"color": "blue-dark"}, {"color": "green-light"}],
     [('{"color":"gre‸y"}', "grey"),
      ('{"color":"red-‸medium"}', "unknown shade"),
      ('{"color":"‸Red"}', "capitalised")])

# --- formats ---------------------------------------------------------------------------------------

case("format_date_birthday",
     obj({"name": S, "birthday": fmt("date")}, required="all", additional=False),
     [{"name": "Ana", "birthday": "1990-07-15"}, {"name": "Leap", "birthday": "2000-02-29"}],
     [('{"name":"Ana","birthday":"1990-1‸3-01"}', "month 13"),
      ('{"name":"Ana","birthday":"1990‸/07/15"}', "slashes"),
      ('{"name":"Ana","birthday":"90‸-07-15"}', "2-digit year"),
      ('{"name":"Ana","birthday":"1990-07-15‸T00:00:00Z"}', "a date-time")])

case("format_time_alarm",
     obj({"at": fmt("time"), "repeat": enum("daily", "weekdays", "once")}, required="all", additional=False),
     [{"at": "07:30:00Z", "repeat": "daily"}, {"at": "18:45:30.250+02:00", "repeat": "once"},
      {"at": "23:59:59-08:00", "repeat": "weekdays"}],
     [('{"at":"07:30:00‸","repeat":"daily"}', "no offset"),
      ('{"at":"07:30‸","repeat":"daily"}', "no seconds"),
      ('{"at":"07‸-30-00Z","repeat":"daily"}', "dashes")])

case("format_datetime_log",
     obj({"timestamp": fmt("date-time"), "level": enum("DEBUG", "INFO", "WARN", "ERROR"), "message": S},
         required="all", additional=False),
     [{"timestamp": "2024-03-10T14:22:05Z", "level": "INFO", "message": "server started"},
      {"timestamp": "2024-03-10T14:22:05.123456+01:00", "level": "ERROR", "message": "disk full: /var\n"}],
     [('{"timestamp":"2024-03-10‸ 14:22:05Z","level":"INFO","message":"m"}', "space for T"),
      ('{"timestamp":"2024-03-10T14:22:05‸","level":"INFO","message":"m"}', "no offset"),
      ('{"timestamp":"2024-0‸0-10T14:22:05Z","level":"INFO","message":"m"}', "month 00")])

case("format_uuid_refs",
     obj({"id": fmt("uuid"), "parent_id": {"type": ["string", "null"], "format": "uuid"},
          "related": arr(fmt("uuid"), maxItems=2)}, required=["id"], additional=False),
     [{"id": "f47ac10b-58cc-4372-a567-0e02b2c3d479"},
      {"id": "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "parent_id": None,
       "related": ["123e4567-e89b-12d3-a456-426614174000"]}],
     [('{"id":"f47ac10b-58cc-4372-a567-0e02b2c3d47‸"}', "uuid too short"),
      ('{"id":"f47ac10b‸58cc-4372-a567-0e02b2c3d479"}', "missing dash"),
      ('{"id":"f47ac10b-58cc-4372-a567-0e02b2c3d47‸g"}', "g is not hex"),
      ('{"id":"123e4567-e89b-12d3-a456-426614174000","parent_id":"‸none"}', "not a uuid")])

case("format_email_recipients",
     obj({"to": arr(fmt("email"), minItems=1, maxItems=3), "cc": arr(fmt("email"))}, required=["to"], additional=False),
     [{"to": ["a@b.co"]},
      {"to": ["first.last@sub.example.co.uk", "x_y%z+tag@host-name.io"], "cc": []}],
     [('{"to":["alice.example.com‸"]}', "no @"),
      ('{"to":[‸]}', "no recipients"),
      ('{"to":["bob‸ at example.com"]}', "spelled-out at"),
      ('{"to":["a@b.co","c@d.co","e@f.co"‸,"g@h.co"]}', "more than 3 recipients")])

case("format_all_five",
     obj({"id": fmt("uuid"), "email": fmt("email"), "born": fmt("date"), "wake": fmt("time"),
          "joined": fmt("date-time")}, required="all", additional=False),
     [{"id": "550e8400-e29b-41d4-a716-446655440000", "email": "x@y.org", "born": "1985-12-31",
       "wake": "06:00:00+01:00", "joined": "2019-08-24T14:15:22Z"},
      {"id": "a3bb189e-8bf9-3888-9912-ace4e6543002", "email": "obrien@mail.ie", "born": "2001-01-01",
       "wake": "23:00:00.5Z", "joined": "2020-02-29T00:00:00.000-03:30"}],
     [('{"id":"550e8400-e29b-41d4-a716-446655440000","email":"x@y.org","born":"1985-12-3‸2","wake":"06:00:00Z","joined":"2019-08-24T14:15:22Z"}',
       "day 32"),
      ('{"id":"550e8400-e29b-41d4-a716-446655440000","email":"x@y.org","born":"1985-12-31","wake":"06:00:00‸","joined":"2019-08-24T14:15:22Z"}',
       "time without offset"),
      ('{"id":"550e8400-e29b-41d4-a716-446655440000","email":"x@y.org","born":"1985-12-31","wake":"06:00:00Z","joined":"2019-08-24T14:15‸Z"}',
       "date-time without seconds")])

case("top_level_date",
     fmt("date"),
     ["2024-01-01", "1999-12-31"],
     [('"2024-1‸-01"', "1-digit month"), ('‸20240101', "a number"), ('"2024-01-01‸ "', "trailing space")])

# --- integer ranges --------------------------------------------------------------------------------

case("int_age_range",
     obj({"age": irange(0, 150)}, required="all", additional=False),
     [{"age": 0}, {"age": 150}, {"age": 42}],
     [('{"age":‸-1}', "negative"), ('{"age":15‸1}', "151"), ('{"age":20‸0}', "200"),
      ('{"age":‸"42"}', "a string")])

case("int_exclusive_bounds",
     obj({"percent": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100}}, required="all", additional=False),
     [{"percent": 1}, {"percent": 99}, {"percent": 50}],
     [('{"percent":‸0}', "0 is excluded"), ('{"percent":10‸0}', "100 is excluded"), ('{"percent":‸-5}', "negative")])

case("int_negative_range",
     obj({"offset": irange(-50, -10)}, required="all", additional=False),
     [{"offset": -50}, {"offset": -10}, {"offset": -25}],
     [('{"offset":-‸9}', "-9 above -10"), ('{"offset":‸5}', "positive"), ('{"offset":-5‸1}', "-51 below -50"),
      ('{"offset":‸0}', "zero")])

case("temperature_celsius_range",
     obj({"min_c": irange(-40, 60), "max_c": irange(-40, 60)}, required="all", additional=False),
     [{"min_c": -40, "max_c": 60}, {"min_c": -3, "max_c": 0}],
     [('{"min_c":-4‸1,"max_c":0}', "-41 below -40"), ('{"min_c":0,"max_c":6‸1}', "61 above 60"),
      ('{"min_c":0,"max_c":‸"60"}', "a string")])

case("int_min_only_large",
     obj({"year": irange(1900), "population": irange(1000)}, required="all", additional=False),
     [{"year": 1900, "population": 1000}, {"year": 2024, "population": 8100000000}],
     [('{"year":1899‸,"population":1000}', "1899 below 1900 (a longer number would fit)"),
      ('{"year":2000,"population":999‸}', "999 below 1000"),
      ('{"year":‸-1,"population":1000}', "negative year")])

case("int_max_only_nonpositive",
     obj({"balance_delta": {"type": "integer", "maximum": 0}, "note": S}, required=["balance_delta"], additional=False),
     [{"balance_delta": 0}, {"balance_delta": -5}, {"balance_delta": -1000000, "note": "refund"}],
     [('{"balance_delta":‸1}', "positive"), ('{"balance_delta":‸"0"}', "a string"),
      ('{"balance_delta":-5‸.5}', "a fraction")])

case("top_int_range_three_digits",
     irange(100, 999),
     [100, 999, 512],
     [('5', "5 only starts 500..599"), ('100‸0', "1000 above 999"), ('‸-1', "negative"), ('‸0', "zero")])

case("top_int_exclusive_min",
     {"type": "integer", "exclusiveMinimum": 999},
     [1000, 123456],
     [('99', "99 only starts larger numbers"), ('999', "999 is excluded (9990 would fit)"),
      ('‸-1000', "negative")])

case("int_registered_port",
     obj({"port": {"type": "integer", "minimum": 1024, "exclusiveMaximum": 49152}}, required="all", additional=False),
     [{"port": 1024}, {"port": 8080}, {"port": 49151}],
     [('{"port":1023‸}', "1023 below 1024"), ('{"port":4915‸2}', "49152 is excluded"), ('{"port":‸0}', "zero")])

# --- string lengths --------------------------------------------------------------------------------

case("string_exact_length",
     obj({"pin": slen(4, 4), "country": slen(2, 2)}, required="all", additional=False),
     [{"pin": "0042", "country": "DE"}, {"pin": "ññññ", "country": "日本"}],
     [('{"pin":"004‸","country":"DE"}', "3-character pin"),
      ('{"pin":"0042‸5","country":"DE"}', "5-character pin"),
      ('{"pin":"0042","country":"D‸"}', "1-character country")])

case("string_unicode_max_length",
     obj({"nickname": slen(1, 5), "emoji": slen(1, 3)}, required="all", additional=False),
     [{"nickname": "日本語テキ", "emoji": "🎉🎉🎉"}, {"nickname": "Zoë", "emoji": "😀"}],
     [('{"nickname":"日本語テキ‸X","emoji":"🎉"}', "6 code points"),
      ('{"nickname":"a","emoji":"🎉🎉🎉‸!"}', "4 code points"),
      ('{"nickname":"‸","emoji":"🎉"}', "empty nickname")])

case("string_length_with_escapes",
     obj({"text": slen(3, 6)}, required="all", additional=False),
     [{"text": "a\nb"}, {"text": "\"q\""}, {"text": "C:\\dir"}, {"text": "\t\t\t"}],
     [('{"text":"a\\n‸"}', "2 characters"),
      ('{"text":"abcdef‸\\n"}', "7 characters"),
      ('{"text":"‸"}', "empty")])

case("tweet_like_post",
     obj({"text": slen(1, 20), "reply_to": irange(1), "lang": slen(2, 5)}, required=["text"], additional=False),
     [{"text": "hello world"}, {"text": "¡Hola! 👋🌍", "reply_to": 12345, "lang": "es"},
      {"text": "exactly twenty chars", "lang": "en-GB"}],
     [('{"text":"this text is far too‸ long"}', "longer than 20"),
      ('{"text":"hi","lang":"e‸"}', "1-character lang"),
      ('{"text":"hi","reply_to":‸0}', "reply_to below 1")])

# --- additionalProperties --------------------------------------------------------------------------

case("additional_true_metadata",
     obj({"id": I, "name": S}, required=["id"], additional=True),
     [{"id": 1}, {"id": 2, "name": "n", "anything": [1, {"x": None}], "more": "ok"}, {"id": 3, "extra": True}],
     [('{"id":‸"1","name":"x"}', "id is a string"),
      ('{"id":1‸.5}', "id has a fraction"),
      ('{"‸name":"x"}', "id missing")])

case("additional_schema_strings",
     obj({"id": I}, required=["id"], additional=S),
     [{"id": 1}, {"id": 1, "x": "a", "y": "b"}, {"id": 2, "ключ": "значение"}],
     [('{"id":1,"x":‸2}', "extra value is a number"),
      ('{"id":1,"x":"a","y":‸null}', "extra value is null"),
      ('{"‸x":"a"}', "id missing")])

case("word_counts_map",
     {"type": "object", "additionalProperties": irange(0)},
     [{}, {"the": 10, "cat": 1}, {"日本": 3}],
     [('{"a":1,"b":‸"2"}', "count is a string"), ('{"a":‸-1}', "negative count"), ('‸[]', "an array")])

case("translations_map",
     {"type": "object",
      "additionalProperties": obj({"text": slen(1), "reviewed": B}, required=["text"], additional=False)},
     [{"en": {"text": "Hello"}, "fr": {"text": "Bonjour", "reviewed": True}}, {}],
     [('{"en":{"text":"‸"}}', "empty text"),
      ('{"en":{"text":"Hi","‸note":"x"}}', "property not in schema"),
      ('{"en":‸"Hello"}', "a string, not an object")])

case("http_headers_map",
     obj({"Content-Type": enum("application/json", "text/plain")}, required="all", additional=pat(r"^[ -~]*$")),
     [{"Content-Type": "application/json"},
      {"Content-Type": "text/plain", "X-Request-Id": "abc-123", "Accept": "*/*"}],
     [('{"Content-Type":"application/‸xml"}', "content type not in enum"),
      ('{"Content-Type":"text/plain","X-Count":‸5}', "header value is a number"),
      ('{"‸X-Id":"1"}', "Content-Type missing")])

case("declared_plus_numeric_extras",
     obj({"label": S}, required=["label"], additional=N),
     [{"label": "m", "x": 1.5, "y": -2}, {"label": "only"}],
     [('{"label":"m","x":‸"1"}', "extra value is a string"),
      ('{"label":‸1}', "label is a number"),
      ('{"label":"m","x":1,"y":‸true}', "extra value is a boolean")])

# --- realistic API shapes --------------------------------------------------------------------------

case("fn_get_weather_args",
     {"type": "object", "description": "Arguments for get_weather",
      "properties": {"location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
      "required": ["location"], "additionalProperties": False},
     [{"location": "Paris, France"}, {"location": "São Paulo, Brazil", "unit": "celsius"},
      {"location": "東京", "unit": "fahrenheit"}],
     [('{"location":"Paris","unit":"‸kelvin"}', "unit not in enum"),
      ('{"‸unit":"celsius"}', "location missing"),
      ('{"location":‸["Paris"]}', "location is an array")])

case("fn_search_web_args",
     obj({"query": slen(1, 200), "max_results": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
          "safe_search": B, "site": pat(r"^[a-z0-9.-]+\.[a-z]{2,}$")}, required=["query"], additional=False),
     [{"query": "llama.cpp grammar"},
      {"query": "météo", "max_results": 10, "safe_search": True, "site": "wikipedia.org"}],
     [('{"query":"x","max_results":1‸1}', "max_results above 10"),
      ('{"query":"‸"}', "empty query"),
      ('{"query":"x","site":"‸Wikipedia.org"}', "upper-case site"),
      ('{"query":"x","site":"localhost‸"}', "site without a TLD")])

case("fn_send_email_args",
     obj({"to": arr(fmt("email"), minItems=1, maxItems=5), "subject": slen(1, 78), "body": S,
          "cc": arr(fmt("email"), maxItems=5), "priority": enum("low", "normal", "high")},
         required=["to", "subject", "body"], additional=False),
     [{"to": ["team@example.com"], "subject": "Status update", "body": "All green.\nThanks!"},
      {"to": ["a@x.io", "b@x.io"], "subject": "Réunion", "body": "Demain à 10h", "cc": ["boss@x.io"],
       "priority": "high"}],
     [('{"to":[‸],"subject":"s","body":"b"}', "no recipients"),
      ('{"to":["a@x.io"],"subject":"s","body":"b","priority":"‸urgent"}', "priority not in enum"),
      ('{"to":["a@x.io"],"‸body":"b"}', "subject missing"),
      ('{"to":["ax.io‸"],"subject":"s","body":"b"}', "recipient without @")])

case("fn_create_calendar_event",
     obj({"title": slen(1, 100), "start": fmt("date-time"), "end": fmt("date-time"), "all_day": B, "location": S,
          "attendees": arr(obj({"email": fmt("email"), "optional": B}, required=["email"], additional=False), maxItems=10),
          "reminders_min": arr(irange(0, 10080), maxItems=3),
          "recurrence": enum("none", "daily", "weekly", "monthly")},
         required=["title", "start", "end"], additional=False),
     [{"title": "Standup", "start": "2024-05-06T09:00:00+02:00", "end": "2024-05-06T09:15:00+02:00",
       "recurrence": "daily"},
      {"title": "Design review 🎨", "start": "2024-05-07T14:00:00Z", "end": "2024-05-07T15:00:00Z", "all_day": False,
       "location": "Room 4.2", "attendees": [{"email": "ana@corp.com"}, {"email": "li@corp.com", "optional": True}],
       "reminders_min": [10, 1440]}],
     [('{"title":"x","start":"2024-05-06T09:00:00Z","end":"2024-05-06T10:00:00Z","reminders_min":[10,1008‸1]}',
       "reminder above one week"),
      ('{"title":"x","start":"2024-05-06T09:00‸+02:00","end":"2024-05-06T10:00:00Z"}', "start without seconds"),
      ('{"title":"x","start":"2024-05-06T09:00:00Z","end":"2024-05-06T10:00:00Z","recurrence":"‸yearly"}',
       "recurrence not in enum"),
      ('{"title":"x","start":"2024-05-06T09:00:00Z","end":"2024-05-06T10:00:00Z","attendees":[{"‸optional":true}]}',
       "attendee email missing")])

case("product_catalog_item",
     obj({"sku": pat(r"^[A-Z]{2,4}-\d{3,6}$"), "name": slen(1, 120), "description": S,
          "price": obj({"amount": N, "currency": enum("USD", "EUR", "GBP")}, required="all", additional=False),
          "tags": arr(slen(1, 20), maxItems=5), "in_stock": B, "stock_count": irange(0),
          "dimensions_cm": {"type": "array", "prefixItems": [N, N, N], "items": False},
          "variants": arr(obj({"color": pat(r"^#[0-9a-f]{6}$"), "size": enum("XS", "S", "M", "L", "XL")},
                              required=["size"], additional=False))},
         required=["sku", "name", "price", "in_stock"], additional=False),
     [{"sku": "TSH-1001", "name": "Classic Tee", "price": {"amount": 19.99, "currency": "USD"}, "in_stock": True},
      {"sku": "MUG-042", "name": "Tasse « Café »", "description": "Céramique, 350 ml",
       "price": {"amount": 12, "currency": "EUR"}, "tags": ["kitchen", "gift"], "in_stock": False, "stock_count": 0,
       "dimensions_cm": [8, 8, 9.5], "variants": [{"color": "#ffffff", "size": "M"}, {"size": "L"}]}],
     [('{"sku":"‸tsh-1001","name":"T","price":{"amount":1,"currency":"USD"},"in_stock":true}', "lower-case sku"),
      ('{"sku":"TSH-1001","name":"T","price":{"amount":1,"currency":"USD"},"in_stock":true,"variants":[{"size":"X‸XL"}]}',
       "size not in enum"),
      ('{"sku":"TSH-1001","name":"T","price":{"amount":1‸},"in_stock":true}', "currency missing"),
      ('{"sku":"TSH-1001","name":"T","price":{"amount":1,"currency":"USD"},"in_stock":true,"stock_count":‸-3}',
       "negative stock")])

case("user_profile_full",
     obj({"id": fmt("uuid"), "username": pat(r"^[a-z][a-z0-9_]{2,15}$"), "email": fmt("email"),
          "display_name": slen(1, 50), "bio": slen(0, 160), "birthday": fmt("date"),
          "links": arr(obj({"label": S, "url": pat(r"^https?://\S+$")}, required="all", additional=False), maxItems=3),
          "settings": obj({"theme": enum("system", "light", "dark"), "language": pat(r"^[a-z]{2}(-[A-Z]{2})?$"),
                           "notifications": obj({"email": B, "push": B}, required="all", additional=False)},
                          required=["theme"], additional=False),
          "created_at": fmt("date-time")},
         required=["id", "username", "email", "created_at"], additional=False),
     [{"id": "9b2f6c1e-3d4a-4f5b-8c7d-1e2f3a4b5c6d", "username": "ada_l", "email": "ada@example.com",
       "created_at": "2023-01-15T10:00:00Z"},
      {"id": "9b2f6c1e-3d4a-4f5b-8c7d-1e2f3a4b5c6d", "username": "jose_m", "email": "jose@example.es",
       "display_name": "José Martínez", "bio": "Ingeniero. Café ☕ y montaña ⛰", "birthday": "1988-11-05",
       "links": [{"label": "blog", "url": "https://blog.example.es/jose"}],
       "settings": {"theme": "dark", "language": "es-ES", "notifications": {"email": False, "push": True}},
       "created_at": "2021-06-30T18:45:00+02:00"}],
     [('{"id":"9b2f6c1e-3d4a-4f5b-8c7d-1e2f3a4b5c6d","username":"‸Ada_l","email":"a@b.co","created_at":"2023-01-15T10:00:00Z"}',
       "upper-case username"),
      ('{"id":"9b2f6c1e-3d4a-4f5b-8c7d-1e2f3a4b5c6d","username":"ada","email":"a@b.co","settings":{"theme":"dark","language":"en-‸us"},"created_at":"2023-01-15T10:00:00Z"}',
       "lower-case region"),
      ('{"id":"9b2f6c1e-3d4a-4f5b-8c7d-1e2f3a4b5c6d","username":"ada","email":"a@b.co","links":[{"label":"x","url":"https://x.org/‸ y"}],"created_at":"2023-01-15T10:00:00Z"}',
       "space in URL"),
      ('{"id":"9b2f6c1e-3d4a-4f5b-8c7d-1e2f3a4b5c6d","username":"ada","email":"a@b.co"‸}', "created_at missing")])

case("invoice_document",
     {"$defs": {"party": obj({"name": S, "vat_id": pat(r"^[A-Z]{2}[0-9A-Z]{8,12}$"), "address": S},
                             required=["name", "address"], additional=False)},
      **obj({"invoice_number": pat(r"^INV-\d{4}-\d{5}$"), "issue_date": fmt("date"), "due_date": fmt("date"),
             "seller": {"$ref": "#/$defs/party"}, "buyer": {"$ref": "#/$defs/party"},
             "lines": arr(obj({"description": slen(1, 200), "quantity": irange(1, 10000), "unit_price": N,
                               "tax_rate": enum(0, 0.07, 0.19)},
                              required=["description", "quantity", "unit_price"], additional=False), minItems=1),
             "total": N, "status": enum("draft", "sent", "paid", "void"), "notes": {"type": ["string", "null"]}},
            required=["invoice_number", "issue_date", "seller", "buyer", "lines", "total", "status"],
            additional=False)},
     [{"invoice_number": "INV-2024-00042", "issue_date": "2024-04-01", "due_date": "2024-05-01",
       "seller": {"name": "Acme GmbH", "vat_id": "DE123456789", "address": "Hauptstraße 1, Berlin"},
       "buyer": {"name": "Bob Ltd", "address": "1 High St, London"},
       "lines": [{"description": "Consulting", "quantity": 10, "unit_price": 150, "tax_rate": 0.19},
                 {"description": "Travel", "quantity": 1, "unit_price": 320.5}],
       "total": 2105.5, "status": "sent", "notes": None},
      {"invoice_number": "INV-2023-00001", "issue_date": "2023-12-31", "seller": {"name": "S", "address": "a"},
       "buyer": {"name": "B", "address": "b"}, "lines": [{"description": "Item", "quantity": 1, "unit_price": 0}],
       "total": 0, "status": "draft"}],
     [('{"invoice_number":"INV-23‸-00001","issue_date":"2023-12-31","seller":{"name":"S","address":"a"},"buyer":{"name":"B","address":"b"},"lines":[{"description":"Item","quantity":1,"unit_price":0}],"total":0,"status":"draft"}',
       "2-digit year in the number"),
      ('{"invoice_number":"INV-2023-00001","issue_date":"2023-12-31","seller":{"name":"S","address":"a"},"buyer":{"name":"B","address":"b"},"lines":[‸],"total":0,"status":"draft"}',
       "no lines"),
      ('{"invoice_number":"INV-2023-00001","issue_date":"2023-12-31","seller":{"name":"S","address":"a"},"buyer":{"name":"B","address":"b"},"lines":[{"description":"Item","quantity":1,"unit_price":0,"tax_rate":0.‸2}],"total":0,"status":"draft"}',
       "tax rate not in enum"),
      ('{"invoice_number":"INV-2023-00001","issue_date":"2023-12-31","seller":{"name":"S","address":"a"},"buyer":{"name":"B","address":"b"},"lines":[{"description":"Item","quantity":‸0,"unit_price":0}],"total":0,"status":"draft"}',
       "quantity 0")])

case("github_issue",
     {"$defs": {"user": obj({"login": pat(r"^[A-Za-z0-9-]{1,39}$"), "id": irange(1)}, required="all", additional=False)},
      **obj({"number": irange(1), "title": slen(1, 256), "state": enum("open", "closed"),
             "state_reason": {"type": ["string", "null"], "enum": ["completed", "not_planned", "reopened", None]},
             "user": {"$ref": "#/$defs/user"}, "assignees": arr({"$ref": "#/$defs/user"}, maxItems=10),
             "labels": arr(obj({"name": S, "color": pat(r"^[0-9a-f]{6}$")}, required="all", additional=False)),
             "milestone": {"anyOf": [obj({"title": S, "due_on": fmt("date-time")}, required=["title"], additional=False),
                                     NULL]},
             "comments": irange(0), "created_at": fmt("date-time"), "body": {"type": ["string", "null"]}},
            required=["number", "title", "state", "user", "labels", "created_at"], additional=False)},
     [{"number": 1347, "title": "Found a bug", "state": "open", "user": {"login": "octocat", "id": 1},
       "labels": [{"name": "bug", "color": "d73a4a"}], "created_at": "2011-04-22T13:33:48Z"},
      {"number": 2, "title": "Crash on startup with UTF-8 path «ü»", "state": "closed", "state_reason": "completed",
       "user": {"login": "dev-1", "id": 99}, "assignees": [{"login": "octocat", "id": 1}], "labels": [],
       "milestone": None, "comments": 3, "created_at": "2024-01-02T03:04:05+00:00", "body": "Steps:\n1. run\n2. crash"},
      {"number": 3, "title": "Docs", "state": "open", "user": {"login": "a", "id": 5}, "labels": [],
       "milestone": {"title": "v1.0", "due_on": "2024-12-31T23:59:59Z"}, "created_at": "2024-06-01T00:00:00Z",
       "body": None}],
     [('{"number":1,"title":"t","state":"‸reopened","user":{"login":"a","id":1},"labels":[],"created_at":"2024-01-01T00:00:00Z"}',
       "state not in enum"),
      ('{"number":1,"title":"t","state":"open","user":{"login":"a","id":1},"labels":[{"name":"bug","color":"‸#d73a4a"}],"created_at":"2024-01-01T00:00:00Z"}',
       "color with #"),
      ('{"number":1,"title":"t","state":"open","user":{"login":"octo‸ cat","id":1},"labels":[],"created_at":"2024-01-01T00:00:00Z"}',
       "space in login"),
      ('{"number":1,"title":"t","state":"open","user":{"login":"a","id":1},"labels":[],"milestone":{"‸due_on":"2024-12-31T23:59:59Z"},"created_at":"2024-01-01T00:00:00Z"}',
       "milestone title missing")])

case("weather_report",
     obj({"location": obj({"city": S, "country": pat(r"^[A-Z]{2}$"),
                           "coords": {"type": "array", "prefixItems": [N, N], "items": False}},
                          required=["city", "country"], additional=False),
          "observed_at": fmt("date-time"), "temperature_c": N, "humidity_pct": irange(0, 100),
          "conditions": enum("clear", "clouds", "rain", "snow", "storm", "fog"),
          "wind": obj({"speed_kmh": N, "direction": enum("N", "NE", "E", "SE", "S", "SW", "W", "NW")},
                      required="all", additional=False),
          "forecast": arr(obj({"day": fmt("date"), "high_c": N, "low_c": N, "precip_chance": irange(0, 100)},
                              required=["day", "high_c", "low_c"], additional=False), maxItems=7),
          "alerts": arr(S)},
         required=["location", "observed_at", "temperature_c", "conditions"], additional=False),
     [{"location": {"city": "Reykjavík", "country": "IS"}, "observed_at": "2024-01-10T12:00:00Z",
       "temperature_c": -3.5, "conditions": "snow"},
      {"location": {"city": "Sydney", "country": "AU", "coords": [-33.87, 151.21]},
       "observed_at": "2024-01-10T23:00:00+11:00", "temperature_c": 31, "humidity_pct": 60, "conditions": "clear",
       "wind": {"speed_kmh": 12.5, "direction": "SE"},
       "forecast": [{"day": "2024-01-11", "high_c": 33, "low_c": 22, "precip_chance": 10},
                    {"day": "2024-01-12", "high_c": 27.5, "low_c": 20}],
       "alerts": ["UV index extreme"]}],
     [('{"location":{"city":"Reykjavík","country":"IS"},"observed_at":"2024-01-10T12:00:00Z","temperature_c":1,"humidity_pct":10‸1,"conditions":"fog"}',
       "humidity above 100"),
      ('{"location":{"city":"X","country":"IS"},"observed_at":"2024-01-10T12:00:00Z","temperature_c":1,"conditions":"fog","wind":{"speed_kmh":5,"direction":"N‸NE"}}',
       "direction not in enum"),
      ('{"location":{"city":"X","country":"IS"},"observed_at":"2024-01-10T12:00:00Z","temperature_c":1,"conditions":"s‸unny"}',
       "conditions not in enum"),
      ('{"location":{"city":"X","country":"IS"},"observed_at":"2024-01-10T12:00:00Z","temperature_c":‸"cold","conditions":"fog"}',
       "temperature is a string")])

case("ecommerce_order",
     obj({"order_id": pat(r"^ORD-[0-9A-F]{8}$"),
          "customer": obj({"id": fmt("uuid"), "email": fmt("email"), "name": S}, required=["id", "email"], additional=False),
          "items": arr(obj({"product_id": I, "quantity": irange(1, 99), "price": N}, required="all", additional=False),
                       minItems=1, maxItems=50),
          "shipping": obj({"method": enum("standard", "express", "pickup"), "address": {"type": ["string", "null"]}},
                          required="all", additional=False),
          "coupon": {"type": ["string", "null"], "maxLength": 12}, "placed_at": fmt("date-time"), "gift": B},
         required=["order_id", "customer", "items", "shipping", "placed_at"], additional=False),
     [{"order_id": "ORD-00AB12CD",
       "customer": {"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "email": "kim@example.kr"},
       "items": [{"product_id": 17, "quantity": 2, "price": 4.5}],
       "shipping": {"method": "pickup", "address": None}, "placed_at": "2024-11-29T08:00:00Z"},
      {"order_id": "ORD-FFFFFFFF",
       "customer": {"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "email": "kim@example.kr", "name": "김민지"},
       "items": [{"product_id": 1, "quantity": 99, "price": 0.99}, {"product_id": 2, "quantity": 1, "price": 250}],
       "shipping": {"method": "express", "address": "서울특별시 중구 세종대로 110"}, "coupon": "SUMMERSALE20",
       "placed_at": "2024-07-01T12:30:00+09:00", "gift": True}],
     [('{"order_id":"ORD-00‸ab12CD","customer":{"id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","email":"k@x.kr"},"items":[{"product_id":1,"quantity":1,"price":1}],"shipping":{"method":"pickup","address":null},"placed_at":"2024-11-29T08:00:00Z"}',
       "lower-case hex in order id"),
      ('{"order_id":"ORD-00AB12CD","customer":{"id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","email":"k@x.kr"},"items":[{"product_id":1,"quantity":10‸0,"price":1}],"shipping":{"method":"pickup","address":null},"placed_at":"2024-11-29T08:00:00Z"}',
       "quantity above 99"),
      ('{"order_id":"ORD-00AB12CD","customer":{"id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","email":"k@x.kr"},"items":[{"product_id":1,"quantity":1,"price":1}],"shipping":{"method":"pickup"‸},"placed_at":"2024-11-29T08:00:00Z"}',
       "shipping address missing"),
      ('{"order_id":"ORD-00AB12CD","customer":{"id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","email":"k@x.kr"},"items":[{"product_id":1,"quantity":1,"price":1}],"shipping":{"method":"pickup","address":null},"coupon":"SUMMERSALE20‸X","placed_at":"2024-11-29T08:00:00Z"}',
       "coupon longer than 12")])

case("blog_post",
     obj({"title": slen(1, 120), "slug": pat(r"^[a-z0-9]+(?:-[a-z0-9]+)*$"),
          "author": obj({"name": S, "email": fmt("email")}, required=["name"], additional=False),
          "published_at": {"anyOf": [fmt("date-time"), NULL]}, "tags": arr(pat(r"^[a-z]+$"), maxItems=5),
          "body_markdown": S, "draft": B},
         required=["title", "slug", "author", "body_markdown"], additional=False),
     [{"title": "Hello", "slug": "hello", "author": {"name": "Me"}, "body_markdown": "# Hello\n\nFirst post."},
      {"title": "Grammar-constrained decoding", "slug": "grammar-constrained-decoding",
       "author": {"name": "Ana", "email": "ana@blog.dev"}, "published_at": "2024-02-14T09:00:00Z",
       "tags": ["llm", "grammars"], "body_markdown": "Use `json_schema`:\n```json\n{\"type\": \"object\"}\n```",
       "draft": False}],
     [('{"title":"t","slug":"s","author":{"name":"a"},"tags":["llm","‸LLM"],"body_markdown":"b"}', "upper-case tag"),
      ('{"title":"t","slug":"s","author":{"name":"a"},"published_at":"‸yesterday","body_markdown":"b"}',
       "published_at not a date-time"),
      ('{"title":"t","slug":"s","author":{"name":"a"},"tags":["a","b","c","d","e"‸,"f"],"body_markdown":"b"}',
       "more than 5 tags"),
      ('{"title":"t","slug":"s","author":{"name":"a"},"‸draft":true}', "body_markdown missing")])

case("recipe",
     obj({"name": S, "servings": irange(1, 24), "prep_minutes": irange(0, 1440),
          "difficulty": enum("easy", "medium", "hard"),
          "ingredients": arr(obj({"item": S, "amount": N,
                                  "unit": enum("g", "kg", "ml", "l", "tsp", "tbsp", "cup", "piece", None)},
                                 required=["item", "amount", "unit"], additional=False), minItems=1),
          "steps": arr(slen(1, 300), minItems=1, maxItems=20), "vegetarian": B},
         required=["name", "servings", "ingredients", "steps"], additional=False),
     [{"name": "Crêpes", "servings": 4, "prep_minutes": 20, "difficulty": "easy",
       "ingredients": [{"item": "flour", "amount": 250, "unit": "g"}, {"item": "eggs", "amount": 3, "unit": "piece"},
                       {"item": "milk", "amount": 0.5, "unit": "l"}, {"item": "salt", "amount": 1, "unit": None}],
       "steps": ["Mix.", "Rest 30 min.", "Cook thin layers."], "vegetarian": True},
      {"name": "Toast", "servings": 1, "ingredients": [{"item": "bread", "amount": 1, "unit": "piece"}],
       "steps": ["Toast it."]}],
     [('{"name":"x","servings":1,"ingredients":[{"item":"flour","amount":1,"unit":"g‸rams"}],"steps":["s"]}',
       "unit not in enum"),
      ('{"name":"Crêpes","servings":‸0,"ingredients":[{"item":"i","amount":1,"unit":null}],"steps":["s"]}',
       "servings below 1"),
      ('{"name":"x","servings":1,"ingredients":[{"item":"i","amount":1,"unit":null}],"steps":[‸]}', "no steps"),
      ('{"name":"x","servings":1,"ingredients":[{"item":"i","amount":‸"1 cup","unit":null}],"steps":["s"]}',
       "amount is a string")])

case("bank_transaction",
     obj({"id": fmt("uuid"), "account": pat(r"^[A-Z]{2}\d{2}[A-Z0-9]{11,30}$"),
          "amount_minor": irange(-100000000, 100000000), "currency": pat(r"^[A-Z]{3}$"), "booked_on": fmt("date"),
          "type": enum("debit", "credit"), "counterparty": {"type": ["string", "null"], "maxLength": 70},
          "reference": pat(r"^[A-Za-z0-9 /.-]{0,35}$")},
         required=["id", "account", "amount_minor", "currency", "booked_on", "type"], additional=False),
     [{"id": "0f8fad5b-d9cb-469f-a165-70867728950e", "account": "GB82WEST12345698765432", "amount_minor": -4599,
       "currency": "GBP", "booked_on": "2024-03-15", "type": "debit", "counterparty": "Tesco Stores",
       "reference": "CARD 1234 / 15.03"},
      {"id": "0f8fad5b-d9cb-469f-a165-70867728950e", "account": "FR7630006000011234567890189", "amount_minor": 100000000,
       "currency": "EUR", "booked_on": "2024-12-31", "type": "credit", "counterparty": None}],
     [('{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","account":"GB82WEST12345698765432","amount_minor":10000000‸1,"currency":"GBP","booked_on":"2024-03-15","type":"debit"}',
       "amount above the limit"),
      ('{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","account":"GB82WEST12345698765432","amount_minor":1,"currency":"‸gbp","booked_on":"2024-03-15","type":"debit"}',
       "lower-case currency"),
      ('{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","account":"GB82WEST12345698765432","amount_minor":1,"currency":"GBP","booked_on":"2024-03-15","type":"‸refund"}',
       "type not in enum"),
      ('{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","account":"GB82WEST12345698765432","amount_minor":1,"currency":"GBP","booked_on":"2024-03-15","type":"debit","reference":"INV‸#42"}',
       "# in reference")])

case("structured_log_entry",
     obj({"ts": fmt("date-time"), "level": enum("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"),
          "logger": pat(r"^[a-z]+(\.[a-z]+)*$"), "msg": S,
          "ctx": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "null"]}},
          "trace_id": pat(r"^[0-9a-f]{32}$")},
         required=["ts", "level", "msg"], additional=False),
     [{"ts": "2024-08-01T10:00:00.001Z", "level": "INFO", "msg": "GET /api?q=1 -> 200\ttook 5ms"},
      {"ts": "2024-08-01T10:00:01Z", "level": "ERROR", "logger": "gannet.server.http", "msg": "upstream \"llm\" failed",
       "ctx": {"status": 502, "retry": True, "user": None, "path": "/v1/chat"},
       "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}],
     [('{"ts":"2024-08-01T10:00:00Z","level":"INFO","msg":"m","ctx":{"user":‸[1]}}', "ctx value is an array"),
      ('{"ts":"2024-08-01T10:00:00Z","level":"‸warn","msg":"m"}', "lower-case level"),
      ('{"ts":"2024-08-01T10:00:00Z","level":"INFO","msg":"m","trace_id":"4bf92f3577b34da6a3ce929d0e0e473‸"}',
       "31-digit trace id"),
      ('{"ts":"2024-08-01T10:00:00Z","level":"INFO","logger":"‸Gannet","msg":"m"}', "upper-case logger")])

case("chat_assistant_tool_calls",
     obj({"role": {"const": "assistant"}, "content": {"type": ["string", "null"]},
          "tool_calls": arr(obj({
              "id": pat(r"^call_[A-Za-z0-9]{8,24}$"), "type": {"const": "function"},
              "function": obj({"name": pat(r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"), "arguments": S},
                              required="all", additional=False)},
              required="all", additional=False), minItems=1, maxItems=4)},
         required=["role", "content"], additional=False),
     [{"role": "assistant", "content": "The weather in Paris is sunny."},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "call_Abc123XYZ", "type": "function",
           "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\",\"unit\":\"celsius\"}"}},
          {"id": "call_00000000", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}],
     [('{"role":"assistant","content":null,"tool_calls":[{"id":"call‸-123456789","type":"function","function":{"name":"f","arguments":"{}"}}]}',
       "dash after call"),
      ('{"role":"assistant","content":null,"tool_calls":[{"id":"call_12345678","type":"‸tool","function":{"name":"f","arguments":"{}"}}]}',
       "type must be function"),
      ('{"role":"assistant","content":null,"tool_calls":[‸]}', "empty tool_calls"),
      ('{"role":"assistant","content":null,"tool_calls":[{"id":"call_12345678","type":"function","function":{"name":"‸1fn","arguments":"{}"}}]}',
       "function name starts with a digit")])

case("flight_booking",
     obj({"booking_ref": pat(r"^[A-Z0-9]{6}$"),
          "passengers": arr(obj({"first_name": slen(1, 50), "last_name": slen(1, 50), "birth_date": fmt("date"),
                                 "type": enum("adult", "child", "infant")},
                                required=["first_name", "last_name", "type"], additional=False), minItems=1, maxItems=9),
          "segments": arr(obj({"from": pat(r"^[A-Z]{3}$"), "to": pat(r"^[A-Z]{3}$"), "departure": fmt("date-time"),
                               "flight_no": pat(r"^[A-Z0-9]{2}\d{1,4}$"),
                               "cabin": enum("economy", "premium", "business", "first")},
                              required=["from", "to", "departure", "flight_no"], additional=False), minItems=1, maxItems=4),
          "total_price": obj({"amount": N, "currency": pat(r"^[A-Z]{3}$")}, required="all", additional=False)},
         required="all", additional=False),
     [{"booking_ref": "X7K2QP", "passengers": [{"first_name": "Ana", "last_name": "Silva", "type": "adult"}],
       "segments": [{"from": "LIS", "to": "JFK", "departure": "2024-09-01T10:25:00+01:00", "flight_no": "TP201"}],
       "total_price": {"amount": 612.4, "currency": "EUR"}},
      {"booking_ref": "ABC123",
       "passengers": [{"first_name": "Łukasz", "last_name": "Nowak", "birth_date": "1980-05-05", "type": "adult"},
                      {"first_name": "Ola", "last_name": "Nowak", "birth_date": "2020-01-20", "type": "child"}],
       "segments": [{"from": "WAW", "to": "FRA", "departure": "2024-12-20T06:00:00+01:00", "flight_no": "LH1347",
                     "cabin": "business"},
                    {"from": "FRA", "to": "SFO", "departure": "2024-12-20T10:10:00+01:00", "flight_no": "UA927"}],
       "total_price": {"amount": 4210, "currency": "PLN"}}],
     [('{"booking_ref":"X7K2Q‸","passengers":[{"first_name":"A","last_name":"B","type":"adult"}],"segments":[{"from":"LIS","to":"JFK","departure":"2024-09-01T10:25:00Z","flight_no":"TP201"}],"total_price":{"amount":1,"currency":"EUR"}}',
       "5-character booking ref"),
      ('{"booking_ref":"X7K2QP","passengers":[{"first_name":"A","last_name":"B","type":"‸senior"}],"segments":[{"from":"LIS","to":"JFK","departure":"2024-09-01T10:25:00Z","flight_no":"TP201"}],"total_price":{"amount":1,"currency":"EUR"}}',
       "passenger type not in enum"),
      ('{"booking_ref":"X7K2QP","passengers":[{"first_name":"A","last_name":"B","type":"adult"}],"segments":[{"from":"LIS","to":"JFK","departure":"2024-09-01T10:25:00Z","flight_no":"TP2013‸4"}],"total_price":{"amount":1,"currency":"EUR"}}',
       "5-digit flight number"),
      ('{"booking_ref":"X7K2QP","passengers":[{"first_name":"A","last_name":"B","type":"adult"}],"segments":[{"from":"L‸isbon","to":"JFK","departure":"2024-09-01T10:25:00Z","flight_no":"TP201"}],"total_price":{"amount":1,"currency":"EUR"}}',
       "airport name, not code")])

case("package_manifest",
     obj({"name": pat(r"^[a-z0-9-]+$"), "version": pat(r"^\d+\.\d+\.\d+$"), "private": B,
          "license": enum("MIT", "Apache-2.0", "BSD-3-Clause", "GPL-3.0-only"),
          "scripts": {"type": "object", "additionalProperties": S},
          "dependencies": {"type": "object", "additionalProperties": pat(r"^[\^~]?\d+\.\d+\.\d+$")},
          "engines": obj({"node": S}, additional=False)},
         required=["name", "version"], additional=False),
     [{"name": "my-app", "version": "1.0.0"},
      {"name": "gannet-web", "version": "0.3.12", "private": True, "license": "MIT",
       "scripts": {"build": "vite build", "test": "vitest"},
       "dependencies": {"react": "^18.2.0", "lodash": "~4.17.21", "zod": "3.22.4"}, "engines": {"node": ">=18"}}],
     [('{"name":"a","version":"1.0.0","dependencies":{"react":"‸latest"}}', "dist-tag, not a version"),
      ('{"name":"a","version":"1.0‸"}', "2-part version"),
      ('{"name":"a","version":"1.0.0","license":"MIT‸-0"}', "license not in enum"),
      ('{"name":"a","version":"1.0.0","scripts":{"build":‸true}}', "script is a boolean")])

case("movie_review",
     obj({"movie": obj({"title": S, "year": irange(1888, 2100), "imdb_id": pat(r"^tt\d{7,8}$")},
                       required=["title", "year"], additional=False),
          "rating": irange(1, 10), "headline": slen(1, 80), "spoilers": B,
          "reviewer": obj({"name": S, "verified": B}, required=["name"], additional=False)},
         required=["movie", "rating", "headline"], additional=False),
     [{"movie": {"title": "Metropolis", "year": 1927}, "rating": 9, "headline": "Still astonishing"},
      {"movie": {"title": "千と千尋の神隠し", "year": 2001, "imdb_id": "tt0245429"}, "rating": 10,
       "headline": "A masterpiece ✨", "spoilers": False, "reviewer": {"name": "Kenji", "verified": True}}],
     [('{"movie":{"title":"千と千尋の神隠し","year":188‸7},"rating":5,"headline":"h"}', "year before 1888"),
      ('{"movie":{"title":"x","year":2000},"rating":‸0,"headline":"h"}', "rating below 1"),
      ('{"movie":{"title":"x","year":2000,"imdb_id":"‸nm0000123"},"rating":5,"headline":"h"}', "a person id"),
      ('{"movie":{"title":"x","year":2000},"rating":5,"headline":"h","reviewer":{‸}}', "reviewer name missing")])

case("sensor_batch",
     obj({"device_id": fmt("uuid"), "firmware": pat(r"^v\d+\.\d+$"),
          "readings": arr(obj({"t": fmt("date-time"), "kind": enum("temp", "humidity", "co2"), "value": N, "ok": B},
                              required=["t", "kind", "value"], additional=False), minItems=1, maxItems=5),
          "battery_pct": irange(0, 100)},
         required=["device_id", "readings"], additional=False),
     [{"device_id": "e4eaaaf2-d142-11e1-b3e4-080027620cdd",
       "readings": [{"t": "2024-10-01T00:00:00Z", "kind": "temp", "value": 21.25}]},
      {"device_id": "e4eaaaf2-d142-11e1-b3e4-080027620cdd", "firmware": "v2.14",
       "readings": [{"t": "2024-10-01T00:00:00Z", "kind": "co2", "value": 415, "ok": True},
                    {"t": "2024-10-01T00:05:00Z", "kind": "humidity", "value": 0.43, "ok": False}],
       "battery_pct": 87}],
     [('{"device_id":"e4eaaaf2-d142-11e1-b3e4-080027620cdd","firmware":"‸2.14","readings":[{"t":"2024-10-01T00:00:00Z","kind":"temp","value":1}]}',
       "firmware without v"),
      ('{"device_id":"e4eaaaf2-d142-11e1-b3e4-080027620cdd","readings":[{"t":"2024-10-01T00:00:00Z","kind":"‸pressure","value":1}]}',
       "unknown kind"),
      ('{"device_id":"e4eaaaf2-d142-11e1-b3e4-080027620cdd","readings":[{"t":"2024-10-01T00:00:00Z","kind":"temp","value":1}],"battery_pct":10‸1}',
       "battery above 100"),
      ('{"device_id":"e4eaaaf2-d142-11e1-b3e4-080027620cdd","readings":[{"t":"2024-10-01T00:00:00Z","kind":"temp"‸}]}',
       "value missing")])

case("fn_sql_query_args",
     obj({"query": pat(r"^(SELECT|WITH) "), "params": arr({"type": ["string", "number", "boolean", "null"]}, maxItems=10),
          "timeout_ms": irange(100, 30000), "read_only": {"const": True}},
         required=["query", "read_only"], additional=False),
     [{"query": "SELECT * FROM users WHERE id = ?", "params": [42], "read_only": True},
      {"query": "WITH t AS (SELECT 1) SELECT * FROM t", "timeout_ms": 30000, "read_only": True}],
     [('{"query":"‸DELETE FROM users","read_only":true}', "not a SELECT"),
      ('{"query":"SELECT 1","read_only":‸false}', "read_only must be true"),
      ('{"query":"SELECT 1","timeout_ms":50‸,"read_only":true}', "timeout below 100"),
      ('{"query":"SELECT 1","params":[‸[1]],"read_only":true}', "nested array param")])

case("todo_list",
     obj({"owner": S, "items": arr(obj({"id": irange(1), "text": slen(1, 140), "done": B,
                                        "due": fmt("date"), "priority": enum("low", "normal", "high")},
                                       required=["id", "text", "done"], additional=False), maxItems=100)},
         required="all", additional=False),
     [{"owner": "me", "items": []},
      {"owner": "Zoë", "items": [{"id": 1, "text": "Buy milk 🥛", "done": False, "due": "2024-05-01"},
                                 {"id": 2, "text": "File taxes", "done": True, "priority": "high"}]}],
     [('{"owner":"me","items":[{"id":1,"text":"x","done":‸"no"}]}', "done is a string"),
      ('{"owner":"me","items":[{"id":1,"text":"x","done":false,"due":"2024-‸5-1"}]}', "unpadded date"),
      ('{"owner":"me","items":[{"id":1,"text":"Buy milk 🥛"‸}]}', "done missing")])

case("job_posting",
     obj({"title": S, "company": S, "location": {"anyOf": [
              obj({"remote": {"const": True}}, required="all", additional=False),
              obj({"city": S, "country": pat(r"^[A-Z]{2}$")}, required="all", additional=False)]},
          "employment": enum("full_time", "part_time", "contract", "internship"),
          "salary": obj({"min": irange(0), "max": irange(0), "currency": pat(r"^[A-Z]{3}$"),
                         "period": enum("hour", "month", "year")}, required=["min", "currency", "period"], additional=False),
          "skills": arr(slen(1, 30), minItems=1, maxItems=10), "posted": fmt("date")},
         required=["title", "company", "location", "employment", "skills"], additional=False),
     [{"title": "C++ Engineer", "company": "Gannet", "location": {"remote": True}, "employment": "full_time",
       "skills": ["C++20", "CUDA"]},
      {"title": "Stagiaire ML", "company": "Société X", "location": {"city": "Paris", "country": "FR"},
       "employment": "internship", "salary": {"min": 1400, "max": 1800, "currency": "EUR", "period": "month"},
       "skills": ["Python"], "posted": "2024-09-15"}],
     [('{"title":"t","company":"c","location":{"remote":‸false},"employment":"contract","skills":["x"]}', "remote must be true"),
      ('{"title":"t","company":"c","location":{"city":"Paris"‸},"employment":"contract","skills":["x"]}', "country missing"),
      ('{"title":"t","company":"c","location":{"remote":true},"employment":"f‸reelance","skills":["x"]}', "employment not in enum"),
      ('{"title":"t","company":"c","location":{"remote":true},"employment":"contract","skills":[‸]}', "no skills")])

case("quiz_question_oneof_answer",
     obj({"question": slen(5), "answer": {"oneOf": [
              obj({"kind": {"const": "choice"}, "options": arr(S, minItems=2, maxItems=4), "correct": irange(0, 3)},
                  required="all", additional=False),
              obj({"kind": {"const": "boolean"}, "correct": B}, required="all", additional=False),
              obj({"kind": {"const": "numeric"}, "correct": N, "tolerance": N}, required=["kind", "correct"],
                  additional=False)]}},
         required="all", additional=False),
     [{"question": "Capital of Japan?", "answer": {"kind": "choice", "options": ["Kyoto", "Tokyo"], "correct": 1}},
      {"question": "Is water wet?", "answer": {"kind": "boolean", "correct": True}},
      {"question": "Value of pi?", "answer": {"kind": "numeric", "correct": 3.14159, "tolerance": 0.001}}],
     [('{"question":"Pick?","answer":{"kind":"choice","options":["a"‸],"correct":0}}', "one option"),
      ('{"question":"Pick?","answer":{"kind":"choice","options":["a","b"],"correct":‸4}}', "correct index above 3"),
      ('{"question":"True?","answer":{"kind":"boolean","correct":‸"yes"}}', "boolean answer is a string"),
      ('{"question":"Why?‸","answer":{"kind":"boolean","correct":true}}', "question shorter than 5")])

case("appointment_booking",
     obj({"patient_id": pat(r"^P\d{6}$"), "date": fmt("date"), "slot": pat(r"^(0[8-9]|1[0-7]):(00|30)$"),
          "duration_min": enum(15, 30, 60), "reason": slen(0, 200), "contact": obj({"phone": pat(r"^\+\d{7,15}$"),
                                                                                     "email": fmt("email")},
                                                                                    additional=False)},
         required=["patient_id", "date", "slot", "duration_min"], additional=False),
     [{"patient_id": "P000123", "date": "2024-10-07", "slot": "09:30", "duration_min": 30},
      {"patient_id": "P999999", "date": "2024-10-08", "slot": "17:00", "duration_min": 15,
       "reason": "Contrôle annuel", "contact": {"phone": "+33612345678", "email": "p@example.fr"}}],
     [('{"patient_id":"P000123","date":"2024-10-07","slot":"1‸8:00","duration_min":30}', "slot after 17:30"),
      ('{"patient_id":"P000123","date":"2024-10-07","slot":"09:‸15","duration_min":30}', "not a half-hour slot"),
      ('{"patient_id":"P000123","date":"2024-10-07","slot":"09:30","duration_min":‸45}', "45 not allowed"),
      ('{"patient_id":"P000123","date":"2024-10-07","slot":"09:30","duration_min":15,"contact":{"phone":"‸0612345678"}}',
       "phone without +")])

# --- other top-level types -------------------------------------------------------------------------

case("top_boolean",
     B,
     [True, False],
     [('‸null', "null"), ('‸1', "a number"), ('‸"true"', "a string")])

case("top_number",
     N,
     [3.14, -2, 1e16, 2.5e-05],
     [('‸"3.14"', "a string"), ('‸true', "a boolean"), ('‸[1]', "an array")])

case("top_string_free",
     {"type": "string", "description": "any text"},
     ["", "plain", "line1\nline2 \"quoted\" \\ é 日本 🎉"],
     [('‸1', "a number"), ('‸null', "null"), ('‸{"text":"x"}', "an object")])

case("top_nullable_positive_int",
     {"type": ["integer", "null"], "minimum": 1},
     [None, 1, 2147483647],
     [('‸0', "zero"), ('‸-7', "negative"), ('‸"1"', "a string"), ('1‸.5', "a fraction")])

case("top_array_of_emails",
     arr(fmt("email"), maxItems=2),
     [[], ["ops@example.com"], ["a@b.io", "c.d@e.fg.hi"]],
     [('["‸"]', "empty string"), ('["ops.example.com‸"]', "no @"), ('["a@b.io","c@d.io"‸,"e@f.io"]', "more than 2")])

case("top_tuple_version_triple",
     {"type": "array", "prefixItems": [irange(0), irange(0), irange(0)], "items": False,
      "$comment": "major, minor, patch"},
     [[1, 0, 0], [0, 12, 345]],
     [('[1,0,‸-1]', "negative patch"), ('[1,0,0‸,0]', "four parts"), ('[‸"1",0,0]', "a string")])

case("examples_and_defaults_annotated",
     {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Sampling", "description": "LLM sampling options",
      "examples": [{"temperature_milli": 700}], "$comment": "integers only",
      **obj({"temperature_milli": {"type": "integer", "minimum": 0, "maximum": 2000, "default": 1000,
                                   "title": "Temperature x1000"},
             "top_k": {"type": "integer", "minimum": 1, "default": 40, "examples": [1, 40]},
             "stop": {"type": "array", "items": slen(1, 16), "maxItems": 4, "description": "stop strings"}},
            additional=False)},
     [{}, {"temperature_milli": 700}, {"temperature_milli": 0, "top_k": 1, "stop": ["\n\n", "</s>"]}],
     [('{"temperature_milli":200‸1}', "above 2000"), ('{"top_k":‸0}', "top_k below 1"),
      ('{"stop":["‸"]}', "empty stop string"), ('{"stop":["a","b","c","d"‸,"e"]}', "more than 4 stop strings")])

# DATA-END

# ---------------------------------------------------------------------------------------------


def main():
    V = jsonschema.Draft202012Validator
    checker = V.FORMAT_CHECKER
    # The format checks must really run (time and date-time need rfc3339-validator).
    for f, good, bad in (("date", "2024-02-29", "2024-13-01"), ("time", "12:00:00Z", "12:00:00"),
                         ("date-time", "2024-01-01T00:00:00Z", "2024-01-01T00:00:00"),
                         ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"),
                         ("email", "a@b.co", "ab.co")):
        assert checker.conforms(good, f) and not checker.conforms(bad, f), f"format {f} is not checked"

    errors, lines, names = [], [], set()
    n_valid = n_invalid = n_null = 0
    for name, schema, valid, invalid in CASES:
        def err(msg):
            errors.append(f"{name}: {msg}")

        if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name in names:
            err("name not unique snake_case")
        names.add(name)
        try:
            V.check_schema(schema)
            check_subset(schema)
        except (AssertionError, jsonschema.SchemaError) as e:
            err(f"schema: {e}")
            continue
        validator = V(schema, format_checker=checker)
        grammars = (Grammar(schema), Grammar(schema, loose=True))
        if not (2 <= len(valid) <= 4 and 2 <= len(invalid) <= 4):
            err(f"{len(valid)} valid / {len(invalid)} invalid docs (want 2-4 each)")
        valid_docs = []
        for v in valid:
            doc = compact(v)
            valid_docs.append(doc)
            if not validator.is_valid(v):
                err(f"valid doc rejected by jsonschema: {doc} ({next(validator.iter_errors(v)).message})")
            for g in grammars:
                bad, ch, complete = first_bad(g, doc)
                if not complete:
                    err(f"valid doc rejected by the grammar ({'loose' if g.loose else 'engine'}) "
                        f"at byte {bad} {ch!r}: {doc}")
        invalid_out = []
        for marked, why in invalid:
            assert marked.count(MARK) <= 1, marked
            at = marked.find(MARK)
            doc = marked.replace(MARK, "")
            bad_at = len(marked[:at].encode()) if at >= 0 else None
            try:
                x = json.loads(doc)
            except ValueError:
                err(f"invalid doc is not JSON: {doc}")
                continue
            if compact(x) != doc:
                err(f"invalid doc not compact: {doc} vs {compact(x)}")
            if validator.is_valid(x):
                err(f"invalid doc accepted by jsonschema: {doc}")
            for g in grammars:
                got, ch, complete = first_bad(g, doc)
                label = "loose" if g.loose else "engine"
                if complete:
                    err(f"invalid doc accepted by the grammar ({label}): {doc}")
                elif got != bad_at:
                    err(f"bad_at {bad_at} but the grammar ({label}) says {got} ({ch!r}): {marked}")
                elif ch is not None and ord(ch) > 0x7F:
                    err(f"bad character is not ASCII: {marked}")
            invalid_out.append({"doc": doc, "bad_at": bad_at, "why": why})
            n_null += bad_at is None
        for g in grammars:
            for p, content, says in g.pattern_checks:
                if says != bool(re.search(p, content)):
                    err(f"pattern {p!r} on {content!r}: recogniser {says}, re.search {not says}")
        n_valid += len(valid_docs)
        n_invalid += len(invalid_out)
        lines.append(compact({"name": name, "schema": schema, "valid": valid_docs, "invalid": invalid_out}))

    if len(CASES) < 110:
        errors.append(f"only {len(CASES)} schemas (want >= 110)")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        print(f"{len(errors)} problem(s); nothing written", file=sys.stderr)
        return 1
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {len(CASES)} schemas, {n_valid} valid docs, {n_invalid} invalid docs "
          f"({n_null} with bad_at null)")
    return 0


if __name__ == "__main__":
    sys.setrecursionlimit(20000)
    sys.exit(main())
