"""SamplingParams and StructuredOutputsParams, shaped like vLLM's.

The values live in the engine's own C++ struct (gannet._core.SamplingParams), so the
defaults are the engine's and validation is the engine's: a bad value raises ValueError
with the message `gannet generate` prints for it, naming the field.
"""

import json
import re
from typing import Any, Dict, List, Optional, Union

from . import _core
from ._convert import as_bool, as_float, as_int, as_int_list, as_str, as_str_list

__all__ = ["SamplingParams", "StructuredOutputsParams", "GuidedDecodingParams"]

_OWNER = "SamplingParams"

# Field -> conversion, in the order of include/gannet/sampling_params.h. "structured" of the
# C++ struct is `structured_outputs` here (vLLM's name).
_INT, _FLOAT, _BOOL, _OPT_INT, _STRS, _INTS = "int", "float", "bool", "optional int", "strings", "ints"
_FIELDS = {
    "n": _INT,
    "max_tokens": _INT,
    "min_tokens": _INT,
    "temperature": _FLOAT,
    "top_p": _FLOAT,
    "top_k": _INT,
    "min_p": _FLOAT,
    "repetition_penalty": _FLOAT,
    "presence_penalty": _FLOAT,
    "frequency_penalty": _FLOAT,
    "stop": _STRS,
    "stop_token_ids": _INTS,
    "ignore_eos": _BOOL,
    "seed": _OPT_INT,
    "logprobs": _OPT_INT,
    "prompt_logprobs": _OPT_INT,
    "num_speculative_tokens": _OPT_INT,
    "skip_special_tokens": _BOOL,
    "include_stop_str_in_output": _BOOL,
}

# vLLM fields gannet does not implement, with the value that means "not used". Any other
# value is refused: each would change what is generated.
_UNSUPPORTED = {
    "best_of": None,
    "logits_processors": None,
    "bad_words": None,
    "allowed_token_ids": None,
    "logit_bias": None,
    "truncate_prompt_tokens": None,
    "detokenize": True,
    "spaces_between_special_tokens": True,
    "output_kind": None,
    "extra_args": None,
    "guided_decoding_backend": None,
}


def _convert(name: str, kind: str, value: Any) -> Any:
    if kind == _INT:
        return as_int(_OWNER, name, value)
    if kind == _FLOAT:
        return as_float(_OWNER, name, value)
    if kind == _BOOL:
        return as_bool(_OWNER, name, value)
    if kind == _OPT_INT:
        if value is None:
            return None
        v = as_int(_OWNER, name, value)
        if name == "seed":
            if not 0 <= v < 2**64:
                raise ValueError(f"seed must be in [0, 2**64), got {v}")
            return v
        if v < -(2**31) or v >= 2**31:
            raise ValueError(f"{name} must be a 32-bit integer, got {v}")
        return v
    if kind == _STRS:
        return as_str_list(_OWNER, name, value)
    if kind == _INTS:
        out = as_int_list(_OWNER, name, value)
        for i, v in enumerate(out):
            if not -(2**31) <= v < 2**31:
                raise ValueError(f"{name}[{i}] must be a 32-bit integer, got {v}")
        return out
    raise AssertionError(kind)


_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}/])")


class StructuredOutputsParams:
    """Constrains the output to a JSON Schema, a regular expression, a list of choices, a
    GBNF grammar, or any JSON object (exactly one of them).

    gannet extras: ``trigger`` (the output is free until this text appears; the constraint
    applies after it) and ``max_whitespace`` (JSON kinds: 0 is compact, n > 0 allows up to
    n whitespace characters wherever JSON does).
    """

    def __init__(
        self,
        json: Optional[Union[str, Dict[str, Any]]] = None,
        regex: Optional[str] = None,
        choice: Optional[List[str]] = None,
        grammar: Optional[str] = None,
        json_object: Optional[bool] = None,
        *,
        trigger: str = "",
        max_whitespace: int = 0,
        backend: Optional[str] = None,
        disable_any_whitespace: bool = False,
        whitespace_pattern: Optional[str] = None,
        structural_tag: Optional[str] = None,
        disable_fallback: bool = False,
        disable_additional_properties: bool = False,
    ):
        owner = "StructuredOutputsParams"
        given = [k for k, v in (("json", json), ("regex", regex), ("choice", choice), ("grammar", grammar),
                                ("json_object", json_object)) if v not in (None, False)]
        if len(given) != 1:
            raise ValueError(f"{owner}: give exactly one of json, regex, choice, grammar and json_object"
                             f" (got {', '.join(given) if given else 'none'})")
        for name, value in (("whitespace_pattern", whitespace_pattern), ("structural_tag", structural_tag)):
            if value is not None:
                raise ValueError(f"{owner}: {name} is not supported by gannet")
        if backend not in (None, "auto", "gannet"):
            raise ValueError(f"{owner}: backend must be None, 'auto' or 'gannet' (gannet's own grammar engine), "
                             f"got {backend!r}")
        if as_bool(owner, "disable_additional_properties", disable_additional_properties):
            raise ValueError(f"{owner}: disable_additional_properties is not supported by gannet")
        as_bool(owner, "disable_fallback", disable_fallback)  # there is no fallback to disable
        self.json, self.regex, self.choice, self.grammar, self.json_object = json, regex, choice, grammar, json_object
        self.trigger = as_str(owner, "trigger", trigger)
        self.max_whitespace = as_int(owner, "max_whitespace", max_whitespace)
        if as_bool(owner, "disable_any_whitespace", disable_any_whitespace) and self.max_whitespace:
            raise ValueError(f"{owner}: disable_any_whitespace contradicts max_whitespace={self.max_whitespace}")
        core = _core.StructuredOutput()
        if json is not None:
            core.kind = "json_schema"
            if isinstance(json, str):
                core.spec = json
            else:
                try:
                    core.spec = _json_dumps(json)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{owner}: json must be a JSON Schema as a str or dict ({e})") from None
        elif regex is not None:
            core.kind, core.spec = "regex", as_str(owner, "regex", regex)
        elif choice is not None:
            options = as_str_list(owner, "choice", choice)
            if not options or isinstance(choice, str):
                raise ValueError(f"{owner}: choice must be a non-empty list of strings")
            core.kind = "regex"
            core.spec = "|".join("(" + _REGEX_SPECIAL.sub(r"\\\1", o) + ")" for o in options)
        elif grammar is not None:
            core.kind, core.spec = "grammar", as_str(owner, "grammar", grammar)
        else:
            if json_object is not True:
                raise ValueError(f"{owner}: json_object must be True or None, got {json_object!r}")
            core.kind = "json_object"
        core.trigger = self.trigger
        core.max_whitespace = self.max_whitespace
        self._core = core

    def __repr__(self) -> str:
        kind = self._core.kind
        return f"StructuredOutputsParams(kind={kind!r}, spec={self._core.spec[:60]!r})"


def _json_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# vLLM's earlier name for the same thing.
GuidedDecodingParams = StructuredOutputsParams


class SamplingParams:
    """How a request's tokens are chosen; fields, meanings and defaults as vLLM's.

    Fields: n, max_tokens (16), min_tokens, temperature (1.0; 0 is greedy), top_p, top_k
    (0 or -1: off), min_p, repetition_penalty, presence_penalty, frequency_penalty, stop
    (a string or list of strings), stop_token_ids, ignore_eos, seed (None: drawn by the
    engine, reported in RequestOutput.seed), logprobs, prompt_logprobs (top-N, at most
    20), num_speculative_tokens (None: the engine's), structured_outputs
    (StructuredOutputsParams; `guided_decoding` is accepted as its older name),
    skip_special_tokens, include_stop_str_in_output.
    """

    __slots__ = ("_p", "_structured")

    def __init__(self, **kwargs: Any):
        object.__setattr__(self, "_p", _core.SamplingParams())
        object.__setattr__(self, "_structured", None)
        structured = kwargs.pop("structured_outputs", None)
        guided = kwargs.pop("guided_decoding", None)
        if structured is not None and guided is not None:
            raise ValueError("SamplingParams: give structured_outputs or guided_decoding, not both")
        if kwargs.get("max_tokens", 0) is None:
            raise ValueError("SamplingParams: max_tokens=None (up to the context length) is not supported; "
                             "give a number of tokens")
        for name, value in kwargs.items():
            if name in _FIELDS:
                setattr(self, name, value)
            elif name in _UNSUPPORTED:
                default = _UNSUPPORTED[name]
                if name == "best_of" and value is not None and value == kwargs.get("n", 1):
                    continue
                if value is not None and value != default and value != []:
                    raise ValueError(f"SamplingParams: {name} is not supported by gannet (got {value!r})")
            else:
                raise TypeError(f"SamplingParams got an unexpected keyword argument {name!r}")
        self.structured_outputs = structured if structured is not None else guided
        self._p.validate()

    # Field access goes to the C++ struct.
    def __getattr__(self, name: str) -> Any:
        if name in _FIELDS:
            return getattr(self._p, name)
        raise AttributeError(f"'SamplingParams' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "structured_outputs" or name == "guided_decoding":
            if value is not None and not isinstance(value, StructuredOutputsParams):
                raise ValueError("SamplingParams: structured_outputs must be a StructuredOutputsParams or None, "
                                 f"got {value!r}")
            object.__setattr__(self, "_structured", value)
            self._p.structured = value._core if value is not None else _core.StructuredOutput()
            return
        if name not in _FIELDS:
            raise AttributeError(f"'SamplingParams' object has no attribute {name!r}")
        setattr(self._p, name, _convert(name, _FIELDS[name], value))

    @property
    def structured_outputs(self) -> Optional[StructuredOutputsParams]:
        return self._structured

    guided_decoding = structured_outputs

    def clone(self) -> "SamplingParams":
        other = SamplingParams.__new__(SamplingParams)
        object.__setattr__(other, "_p", _core.SamplingParams(self._p))
        object.__setattr__(other, "_structured", self._structured)
        return other

    def _to_core(self) -> "_core.SamplingParams":
        """The engine's struct, validated (fields may have been changed since __init__)."""
        self._p.validate()
        return self._p

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SamplingParams):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS) and _structured_key(self) == _structured_key(other)

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS)
        return f"SamplingParams({fields}, structured_outputs={self._structured!r})"


def _structured_key(p: SamplingParams):
    s = p._p.structured
    return (s.kind, s.spec, s.trigger, s.max_whitespace)
