"""Checked conversions of user values to the engine's field types.

Every error is a ValueError that names the field, as the engine's own validation does,
so a wrong type reads like a wrong value.
"""

import operator
from typing import Any, List, Optional

__all__ = ["as_int", "as_float", "as_bool", "as_str", "as_int_list", "as_str_list", "on_off_auto"]


def as_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{owner}: {name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{owner}: {name} must be an integer, got {value!r}") from None


def as_float(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise ValueError(f"{owner}: {name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{owner}: {name} must be a number, got {value!r}") from None


def as_bool(owner: str, name: str, value: Any) -> bool:
    # numpy.bool_ and the like convert through __bool__; integers other than 0/1 do not.
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{owner}: {name} must be True or False, got {value!r}")


def as_str(owner: str, name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{owner}: {name} must be a string, got {value!r}")
    if "\0" in value:
        raise ValueError(f"{owner}: {name} must not contain NUL characters")
    return value


def as_int_list(owner: str, name: str, value: Any) -> List[int]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{owner}: {name} must be a list of integers, got {value!r}")
    return [as_int(owner, f"{name}[{i}]", v) for i, v in enumerate(value)]


def as_str_list(owner: str, name: str, value: Any) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not hasattr(value, "__iter__"):
        raise ValueError(f"{owner}: {name} must be a string or a list of strings, got {value!r}")
    return [as_str(owner, f"{name}[{i}]", v) for i, v in enumerate(value)]


def on_off_auto(owner: str, name: str, value: Optional[Any]) -> int:
    """None -> -1 (the engine's default), False -> 0, True -> 1."""
    if value is None:
        return -1
    return 1 if as_bool(owner, name, value) else 0
