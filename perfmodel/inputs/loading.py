"""Reading YAML/JSON files and turning pydantic errors into one-line `InputError`s."""

from __future__ import annotations

import difflib
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from perfmodel.errors import CONTROL_CHARACTERS, InputError

M = TypeVar("M", bound=BaseModel)


# The largest input any command reads (plans, cases, sweep files, stacks, hardware, overlays): the biggest shipped
# file is under 100 kB; a file past this is refused before it is parsed (docs/reliability.md)
MAX_INPUT_BYTES = 4 * 2**20


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML without aliases (a 1 kB file of nested aliases expands to gigabytes: no input of ours needs them) and
    without a key given twice (the second would silently win). Parsed by libyaml where PyYAML was built with it
    (every shipped input, hardware, stacks and cases: 0.77 -> 0.09 s), else by PyYAML's own parser."""

    def construct_document(self, node: yaml.Node) -> Any:
        _refuse_aliases(node)
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, typing.Hashable):
                continue  # SafeLoader refuses it with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {str(key)[:60]!r} is given twice: keep one", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _refuse_aliases(root: yaml.Node) -> None:
    """An alias is the node of its anchor met a second time (either parser shares it): refused there, before
    anything is built from it."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            raise yaml.constructor.ConstructorError(None, None, "an alias (*name) repeats the value anchored here: "
                                                    "aliases are not accepted, write the value out", node.start_mark)
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)


# YAML 1.2 floats: PyYAML (YAML 1.1) reads `180.0e9` and `1e-3` as strings, which strict types would refuse; every
# number a profile or case writes in exponent form is meant as one
_StrictLoader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key[:60]!r} is given twice: keep one")
        out[key] = value
    return out


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows: give a finite value")


def _hostile_value(data: Any) -> tuple[str, str] | None:
    """(where, why) for the first string of `data` (a key or a value) holding a control character, or number that
    is not finite (YAML's .nan and .inf); None when there is none."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str) and CONTROL_CHARACTERS.search(item):
            return where or "<top>", "holds a control character (an escape sequence?): write plain text"
        if isinstance(item, float) and not math.isfinite(item):
            return where or "<top>", f"{item} is not a finite number: give one"
        if isinstance(item, dict):
            for key, value in item.items():
                name = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and CONTROL_CHARACTERS.search(key):
                    return repr(name), "holds a control character (an escape sequence?): write plain text"
                stack.append((value, name))
        elif isinstance(item, list):
            stack.extend((value, f"{where}[{i}]") for i, value in enumerate(item))
    return None


def parse_text(text: str, source: str, json_text: bool) -> Any:
    """YAML or JSON text parsed with the rules every input obeys (no aliases, no key twice, no NaN in JSON);
    InputError naming `source` otherwise."""
    if len(text) > MAX_INPUT_BYTES:
        raise InputError(source, "", f"{len(text) / 2**20:.1f} MB is larger than any input needs "
                         f"({MAX_INPUT_BYTES // 2**20} MB at most): is it the right file?")
    try:
        if json_text:
            data = json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)
        else:
            data = yaml.load(text, Loader=_StrictLoader)
    except (yaml.YAMLError, json.JSONDecodeError, ValueError, RecursionError) as err:
        detail = " ".join(str(err).replace(' in "<unicode string>",', " at").split())[:200]
        raise InputError(source, "", f"malformed {'JSON' if json_text else 'YAML'}: {detail}") from None
    hostile = _hostile_value(data)
    if hostile is not None:
        raise InputError(source, *hostile)
    return data


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Load a YAML or JSON file whose top level must be a mapping."""
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), "", "file not found")
    if p.is_dir():
        raise InputError(str(p), "", "is a folder, expected a file")
    if not p.is_file():  # a FIFO or a device (/dev/zero) would block or never end
        raise InputError(str(p), "", "is not a regular file: give the file itself")
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_INPUT_BYTES + 1)  # never more than the limit, whatever stat says
        if len(raw) > MAX_INPUT_BYTES:
            raise InputError(str(p), "", f"larger than any input needs ({MAX_INPUT_BYTES // 2**20} MB at most): "
                             "is it the right file?")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(p), "", f"cannot read: {err}") from None
    data = parse_text(text, str(p), p.suffix == ".json")
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


def closest(word: str, options: list[str]) -> str | None:
    """The option `word` was most likely meant to be (a typo), or None."""
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    return close[0] if close else None


def did_you_mean(word: str, options: list[str]) -> str:
    """" (did you mean 'x'?)" after a name that is not among `options`, or ""."""
    close = closest(word, options)
    return f" (did you mean {close!r}?)" if close else ""


def _file_order(errors: list[dict[str, Any]], data: Any) -> list[dict[str, Any]]:
    """The errors in the order their keys appear in the file (a missing key, which has no place, last): the user
    reads the first problem where they would meet it."""
    keys = list(data) if isinstance(data, dict) else []

    def place(e: dict[str, Any]) -> int:
        loc = _clean_loc(e)
        top = loc[0] if loc else None
        return keys.index(top) if e.get("type") != "missing" and top in keys else len(keys)

    return sorted(errors, key=place)  # stable: pydantic's order within one key


def first_error(err: ValidationError, source: str, prefix: str = "",
                model: type[BaseModel] | None = None, data: Any = None) -> InputError:
    """Convert the first pydantic error (in file order, with the ids `model.reference_problems` finds in `data`
    among them) into an InputError naming the field and what is valid; the count and fields of the others follow.
    A missing key with a misspelled one beside it is reported as the misspelling, with the key it was meant to be."""
    checks = getattr(model, "reference_problems", None)
    found = [{"type": "reference", "loc": loc, "msg": msg} for loc, msg in (checks(data) if checks else [])]
    errors = _file_order(found + err.errors(include_url=False), data)
    e = errors[0]
    loc = _clean_loc(e)
    covered = {id(e)}  # the errors the reported one stands for
    if e.get("type") == "missing":  # the user typed it, misspelled: name what they typed
        unknown = [x for x in errors if x.get("type") == "extra_forbidden" and _clean_loc(x)[:-1] == loc[:-1]]
        for x in unknown:
            if difflib.get_close_matches(str(_clean_loc(x)[-1]), [str(loc[-1])], n=1, cutoff=0.75):
                e, loc = x, _clean_loc(x)
                covered.add(id(x))
                break
    field = _loc_to_field(loc)
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    kind = e.get("type", "")
    msg = str(e.get("msg", "invalid"))
    if kind == "extra_forbidden":
        valid = _fields_at(model, loc[:-1]) or [str(_clean_loc(x)[-1]) for x in errors if x.get("type") == "missing"
                                                and _clean_loc(x)[:-1] == loc[:-1]]
        meant = closest(str(loc[-1]), valid) if loc else None
        msg = f"unknown key; did you mean {meant!r}?" if meant else "unknown key; remove it or check its spelling"
        covered |= {id(x) for x in errors if x.get("type") == "missing" and _clean_loc(x) == (*loc[:-1], meant)}
    elif kind == "missing":
        msg = "required field is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind not in ("missing", "extra_forbidden") and "input" in e and not isinstance(e["input"], (dict, list)):
        shown = repr(e["input"])
        if len(shown) <= 60:
            msg = f"{msg} (got {shown})"
    others = list(dict.fromkeys(_loc_to_field(_clean_loc(x)) for x in errors if id(x) not in covered))
    if others:
        msg += f" (also {len(others)} more: {', '.join(others[:3])}{', ...' if len(others) > 3 else ''})"
    return InputError(source, field, msg)


def parse(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    """Validate `data` into `model` with strict types (a quoted "8" is not the number 8, `yes` is not true, 8.5
    is not a whole number; a list stands for a tuple, as in JSON), raising a one-line InputError on the first
    problem. Data JSON cannot hold (a YAML date) is validated as it is."""
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError):
        text = None
    try:
        return model.model_validate(data) if text is None else model.model_validate_json(text, strict=True)
    except ValidationError as err:
        raise first_error(err, source, prefix, model, data) from None
