"""Reading YAML/JSON files and turning pydantic errors into one-line `InputError`s."""

from __future__ import annotations

import difflib
import json
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from perfmodel.errors import InputError

M = TypeVar("M", bound=BaseModel)


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Load a YAML or JSON file whose top level must be a mapping."""
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), "", "file not found")
    if p.is_dir():
        raise InputError(str(p), "", "is a folder, expected a file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(p), "", f"cannot read: {err}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError, ValueError, RecursionError) as err:
        detail = " ".join(str(err).split())[:200]
        raise InputError(str(p), "", f"malformed {'JSON' if p.suffix == '.json' else 'YAML'}: {detail}") from None
    if not isinstance(data, dict):
        raise InputError(str(p), "", f"top level must be a mapping, got {type(data).__name__}")
    return data


def _loc_to_field(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _clean_loc(e: dict[str, Any]) -> tuple[int | str, ...]:
    return tuple(x for x in e.get("loc", ()) if not (isinstance(x, str) and x.startswith("function-")))


def _fields_at(model: type[BaseModel] | None, path: tuple[int | str, ...]) -> list[str]:
    """The keys the model accepts at `path` (a mapping's location), following nested models; [] when unknown."""
    cur: Any = model
    for key in path:
        fields = getattr(cur, "model_fields", None)
        if not fields or not isinstance(key, str) or key not in fields:
            return []
        ann = fields[key].annotation
        nested = [a for a in (*typing.get_args(ann), ann) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return []
        cur = nested[0]
    fields = getattr(cur, "model_fields", None) or {}
    return [f.alias or name for name, f in fields.items()]


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def first_error(err: ValidationError, source: str, prefix: str = "",
                model: type[BaseModel] | None = None) -> InputError:
    """Convert the first pydantic error into an InputError naming the field and what is valid. A missing key with a
    misspelled one beside it is reported as the misspelling, with the key it was meant to be."""
    errors = err.errors(include_url=False)
    e = errors[0]
    loc = _clean_loc(e)
    if e.get("type") == "missing":  # the user typed it, misspelled: name what they typed
        unknown = [x for x in errors if x.get("type") == "extra_forbidden" and _clean_loc(x)[:-1] == loc[:-1]]
        for x in unknown:
            if difflib.get_close_matches(str(_clean_loc(x)[-1]), [str(loc[-1])], n=1, cutoff=0.75):
                e, loc = x, _clean_loc(x)
                break
    field = _loc_to_field(loc)
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    kind = e.get("type", "")
    msg = str(e.get("msg", "invalid"))
    if kind == "extra_forbidden":
        valid = _fields_at(model, loc[:-1]) or [str(_clean_loc(x)[-1]) for x in errors if x.get("type") == "missing"
                                                and _clean_loc(x)[:-1] == loc[:-1]]
        hint = _did_you_mean(str(loc[-1]), valid) if loc else ""
        msg = f"unknown key{hint}" if hint else "unknown key; remove it or check its spelling"
    elif kind == "missing":
        msg = "required field is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind not in ("missing", "extra_forbidden") and "input" in e and not isinstance(e["input"], (dict, list)):
        shown = repr(e["input"])
        if len(shown) <= 60:
            msg = f"{msg} (got {shown})"
    return InputError(source, field, msg)


def parse(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    """Validate `data` into `model`, raising a one-line InputError on the first problem."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise first_error(err, source, prefix, model) from None
