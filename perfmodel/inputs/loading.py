"""Reading YAML/JSON files and turning pydantic errors into one-line `InputError`s."""

from __future__ import annotations

import json
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


def first_error(err: ValidationError, source: str, prefix: str = "") -> InputError:
    """Convert the first pydantic error into an InputError naming the field and what is valid."""
    e = err.errors(include_url=False)[0]
    loc = tuple(x for x in e.get("loc", ()) if not (isinstance(x, str) and x.startswith("function-")))
    field = _loc_to_field(loc)
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    kind = e.get("type", "")
    msg = str(e.get("msg", "invalid"))
    if kind == "extra_forbidden":
        msg = "unknown key; remove it or check its spelling"
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
        raise first_error(err, source, prefix) from None
