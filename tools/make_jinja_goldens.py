#!/usr/bin/env python3
"""Reference renderings of small Jinja templates, for gannet's chat-template interpreter.

Each case is a template snippet and its variables, rendered by the jinja2 package in the
environment transformers uses for chat templates (sandboxed and immutable, trim_blocks,
lstrip_blocks, the loop controls, a tojson that is json.dumps with ensure_ascii=False,
raise_exception). Cases that jinja2 refuses are recorded with "error": true; gannet must
refuse them too. tests/unit/test_tokenizer_jinja.cpp replays the file.

Usage (jinja2 only; see tools/requirements-golden.txt):
    python3 tools/make_jinja_goldens.py > tests/golden/jinja/cases.jsonl
"""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


MSGS = [
    {"role": "system", "content": "  Be brief.\n"},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "What's 2+2?"},
]

# (template, variables)
CASES = [
    # text and whitespace control
    ("plain text", {}),
    ("a {{ x }} b", {"x": "X"}),
    ("a   {{- x -}}   b", {"x": "X"}),
    ("line1\n  {% if true %}\n  yes\n  {% endif %}\nend", {}),
    ("line1\n  {%+ if true %}yes{% endif %}\n", {}),
    ("x  {%- if true %} y {% endif -%}  \n\n z", {}),
    ("{# a comment #}\nafter", {}),
    ("  {#- trimmed -#}  after", {}),
    ("a\n    {# c #}\nb", {}),
    ("{% for i in [1, 2, 3] %}\n{{ i }}\n{% endfor %}\n", {}),
    ("{%- for i in [1, 2, 3] -%}\n  {{ i }},\n{%- endfor %}", {}),
    ("{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("{% if x %}\r\nA{% endif %}", {"x": 1}),
    # literals and printing (Python str / repr)
    ("{{ 1 }} {{ -3 }} {{ 2.5 }} {{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ 123456789012345678 }}", {}),
    ("{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", {}),
    ("{{ [1, 'a', none, true, 2.0] }}", {}),
    ("{{ {'k': 'v', 'n': [1, 2]} }}", {}),
    ("{{ x }}", {"x": {"a": "it's", "b": 'say "hi"', "c": "both ' and \""}}),
    ("{{ 'tab\\tnew\\nline' }}|{{ ['tab\\tnew\\nline', 'back\\\\slash'] }}", {}),
    ("{{ 'a' 'b' }} {{ \"q'\" }}", {}),
    ("{{ missing }}|{{ missing is defined }}|{{ missing is undefined }}", {}),
    ("{{ 1 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2.5 * 2 }} {{ 3 - 5 }}", {}),
    ("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'x' + 'y' }} {{ [1] + [2, 3] }} {{ 1 ~ 'a' ~ none }}", {}),
    ("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }} {{ [1, 2] < [1, 3] }} {{ true == 1 }}", {}),
    ("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}", {}),
    ("{{ not 0 }} {{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }}", {}),
    ("{{ 'y' if x else 'n' }} {{ 'y' if not x }}|", {"x": 0}),
    ("{{ -x }} {{ +x }}", {"x": 4}),
    # subscripts and slices
    ("{{ s[0] }}{{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[:-1] }} {{ s[::2] }}", {"s": "héllo"}),
    ("{{ l[1:] }} {{ l[-2:] }} {{ l[5:] }} {{ l[::-1] }} {{ l[1] }} {{ l.0 }}", {"l": [1, 2, 3, 4]}),
    ("{{ d['a'] }} {{ d.a }} {{ d.missing }}|{{ d['missing'] is defined }}", {"d": {"a": 1}}),
    ("{{ messages[0]['content'] }}|{{ messages[-1].role }}", {"messages": MSGS}),
    # filters
    ("{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ none | trim }}|{{ missing | trim }}", {}),
    ("{{ [1, 2] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }}", {}),
    ("{{ 'Hello World' | lower }} {{ 'Hello' | upper }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }}", {}),
    ("{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }} {{ l | join('/', attribute='n') }}", {"l": [{"n": "x"}, {"n": "y"}]}),
    ("{{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ 'abc' | first }} {{ [] | first }}|", {}),
    ("{{ 'abc' | list }} {{ {'a': 1, 'b': 2} | list }} {{ {'a': 1, 'b': 2} | items | list }}", {}),
    ("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}", {"d": {"z": 1, "a": [2]}}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list }}{{ d.values() | list }}", {"d": {"z": 1, "a": 2}}),
    ("{{ missing | default('dflt') }} {{ '' | default('e', true) }} {{ 'v' | default('x') }} {{ none | default('n') }}", {}),
    ("{{ '42' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 3 | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }}", {}),
    ("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 1] | unique | list }}", {}),
    ("{{ [3, 1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ [1, 5, 3] | max }} {{ [4, 2] | min }} {{ [1, 2, 3] | sum }}", {}),
    ("{{ l | map(attribute='n') | list }} {{ ['a', 'b'] | map('upper') | list }}", {"l": [{"n": 1}, {"n": 2}]}),
    ("{{ l | selectattr('ok') | list }} {{ l | rejectattr('ok') | list }} {{ l | selectattr('n', 'equalto', 2) | list }}",
     {"l": [{"n": 1, "ok": True}, {"n": 2, "ok": False}]}),
    ("{{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ [0, 1, ''] | select | list }}", {}),
    ("{{ {'b': 1, 'a': 2} | dictsort }}", {}),
    ("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(4, true) }}", {}),
    ("{{ '<a href=\"x\">&</a>' | e }} {{ 'one two  three' | wordcount }} {{ x | string }}", {"x": [1]}),
    # tojson as transformers defines it
    ("{{ x | tojson }}", {"x": {"name": "f", "args": {"a": [1, 2.5, None, True]}, "u": "é中😀", "q": "a\"b\\c\nd\te\u0001"}}),
    ("{{ x | tojson(indent=2) }}", {"x": {"a": [1, {"b": []}], "c": {}}}),
    ("{{ x | tojson(indent=4) }}", {"x": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]}),
    ("{{ x | tojson(separators=(',', ':')) }} {{ x | tojson(sort_keys=true) }}", {"x": {"b": 1, "a": [1, 2]}}),
    ("{{ 1.5 | tojson }} {{ 10000000000000000.0 | tojson }} {{ 'x' | tojson }} {{ none | tojson }}", {}),
    # tests
    ("{{ 1 is number }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ none is none }} {{ 2 is even }} {{ 3 is odd }}", {}),
    ("{{ 6 is divisibleby 3 }} {{ 6 is divisibleby(4) }} {{ x is sameas false }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}", {"x": False}),
    ("{{ 'a' is eq 'a' }} {{ 3 is gt 2 }} {{ 'abc' is lower }} {{ 2 is in [1, 2] }} {{ x is not none }} {{ [] is sequence }}", {"x": 1}),
    ("{{ f is callable }} {{ raise_exception is defined }}", {"f": 1}),
    # string and list methods
    ("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ ' a '.lstrip() }}|", {}),
    ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.startswith('lo') }}", {}),
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a\\nb'.splitlines() }}", {}),
    ("{{ 'hello'.replace('l', 'L') }} {{ 'hello'.upper() }} {{ 'HeLLo'.lower() }} {{ 'héllo'.find('l') }} {{ 'hello'.count('l') }}", {}),
    ("{{ ', '.join(['a', 'b']) }} {{ '12'.isdigit() }} {{ 'a1'.isalpha() }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }}", {}),
    ("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }}", {"d": {"a": 1}}),
    ("{{ content.split('</think>')[-1].lstrip('\\n') }}", {"content": "<think>\nhmm\n</think>\n\nAnswer"}),
    ("{{ (content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n')) }}", {"content": "<think>\nhmm\n</think>\n\nAnswer"}),
    # statements
    ("{% if a %}A{% elif b %}B{% else %}C{% endif %}", {"a": False, "b": True}),
    ("{% if a %}A{% elif b %}B{% else %}C{% endif %}", {"a": False, "b": False}),
    ("{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}",
     {"messages": MSGS}),
    ("{% for m in messages %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{% if loop.previtem %}<{{ loop.previtem.role }}{% endif %}{% if loop.nextitem is defined %}>{{ loop.nextitem.role }}{% endif %};{% endfor %}",
     {"messages": MSGS}),
    ("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role[0] }}{% endfor %}", {"messages": MSGS}),
    ("{% for x in [] %}x{% else %}empty{% endfor %} {% for x in missing %}x{% endfor %}|", {}),
    ("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("{% set a, b = [1, 2] %}{{ b }}{{ a }} {% set t %}block {{ a }}{% endset %}[{{ t }}]", {}),
    ("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", {}),
    ("{% macro outer(x) %}[{{ inner(x) }}]{% endmacro %}{% macro inner(y) %}{{ y * 2 }}{% endmacro %}{{ outer(3) }}", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("{{ {'a': {'b': 1}}['a']['b'] }} {{ {'a': {'b': 1}} }}", {}),
    ("{{ (1, 2) | list }} {{ ('a',) | length }}", {}),
    ("{{ x.y.z }}", {"x": {"y": {"z": "deep"}}}),
    ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{{ message['role'] }}{% endfor %}",
     {"messages": MSGS}),
    # errors (jinja2 refuses; gannet must too)
    ("{{ raise_exception('bad conversation') }}", {}),
    ("{{ missing.attr }}", {}),
    ("{{ missing + 1 }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ l.append(1) }}", {"l": [1]}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{{ missing() }}", {}),
    ("{% set ns = 1 %}{% set ns.a = 2 %}", {}),
    ("{% if x %}unclosed", {"x": 1}),
    ("{{ 'unclosed }}", {}),
    ("{% unknowntag %}", {}),
    ("{{ 1 | nosuchfilter }}", {}),
    ("{{ 1 is nosuchtest }}", {}),
]


def main():
    env = environment()
    out = sys.stdout
    for template, variables in CASES:
        case = {"template": template, "variables": variables}
        try:
            case["rendered"] = env.from_string(template).render(**variables)
        except Exception as e:  # any refusal: syntax, undefined, type, security, raise_exception
            case["error"] = True
            case["jinja2_error"] = f"{type(e).__name__}: {e}"
        out.write(json.dumps(case, ensure_ascii=False) + "\n")
    sys.stderr.write(f"{len(CASES)} cases, jinja2 {jinja2.__version__}\n")


if __name__ == "__main__":
    main()
