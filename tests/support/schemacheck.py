"""A small JSON Schema (draft 2020-12) validator for the subset cudafix's schemas use.

``type`` (a name or a list of names), ``properties``, ``required``, ``additionalProperties``
(a boolean or a schema), ``items``, ``enum``, ``const``, ``anyOf``, ``oneOf``, ``allOf``,
``minimum``/``exclusiveMinimum``, and ``$ref`` to ``#/$defs/NAME``. Annotations
(``title``, ``description``, ``default``, pydantic's ``discriminator``, the schemas' own
``version``) are ignored; any other keyword is refused, so a schema never relies on one
this validator would skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cudafix.cli.schemas import SCHEMAS, shipped

KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "minimum",
        "exclusiveMinimum",
        "$ref",
        "$defs",
    }
)
ANNOTATIONS = frozenset(
    {"$schema", "$id", "version", "title", "description", "default", "discriminator"}
)

_TYPES: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "array": (list,),
    "object": (dict,),
}


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name not in ("boolean",):
        return False
    return isinstance(value, _TYPES[name])


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def errors(value: Any, schema: dict[str, Any]) -> list[str]:
    """Every way ``value`` fails ``schema`` (empty: it is valid)."""
    out: list[str] = []
    _check(value, schema, schema, "$", out)
    return out


def validate(value: Any, schema: dict[str, Any]) -> None:
    """Fail the test, naming each problem, unless ``value`` is valid."""
    found = errors(value, schema)
    assert not found, "\n".join(found[:20]) + "\n" + json.dumps(value, indent=1)[:3000]


def validate_output(stdout: str, name: str) -> Any:
    """``stdout`` is one JSON value that schema ``name`` describes; the value."""
    assert name in SCHEMAS, name
    value = json.loads(stdout)
    validate(value, json.loads(shipped(name)))
    return value


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix):
        raise ValueError(f"unsupported $ref {ref!r}")
    target: dict[str, Any] = root["$defs"][ref[len(prefix) :]]
    return target


def _check(
    value: Any, schema: dict[str, Any], root: dict[str, Any], at: str, out: list[str]
) -> None:
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise ValueError(f"unsupported keyword(s) {sorted(unknown)} at {at}")
    if "$ref" in schema:
        _check(value, _resolve(root, schema["$ref"]), root, at, out)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, n) for n in names):
            out.append(f"{at}: {type(value).__name__} {value!r:.60} is not {'/'.join(names)}")
            return
    if "const" in schema and not _same(value, schema["const"]):
        out.append(f"{at}: {value!r:.60} is not {schema['const']!r}")
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        out.append(f"{at}: {value!r:.60} is not one of {schema['enum']!r}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        out.append(f"{at}: {value} < {schema['minimum']}")
    if (
        "exclusiveMinimum" in schema
        and _is(value, "number")
        and value <= schema["exclusiveMinimum"]
    ):
        out.append(f"{at}: {value} <= {schema['exclusiveMinimum']}")
    if isinstance(value, dict):
        _check_object(value, schema, root, at, out)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], root, f"{at}[{i}]", out)
    for sub in schema.get("allOf", []):
        _check(value, sub, root, at, out)
    if "anyOf" in schema and all(errors_in(value, s, root, at) for s in schema["anyOf"]):
        out.append(f"{at}: matches none of anyOf: " + _closest(value, schema["anyOf"], root, at))
    if "oneOf" in schema:
        matching = [s for s in schema["oneOf"] if not errors_in(value, s, root, at)]
        if len(matching) != 1:
            why = _closest(value, schema["oneOf"], root, at) if not matching else "several"
            out.append(f"{at}: matches {len(matching)} of oneOf (one expected): {why}")


def _check_object(
    value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], at: str, out: list[str]
) -> None:
    properties = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in value:
            out.append(f"{at}: missing required field {key!r}")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        where = f"{at}.{key}"
        if key in properties:
            _check(item, properties[key], root, where, out)
        elif extra is False:
            out.append(f"{at}: field {key!r} is not in the schema")
        elif isinstance(extra, dict):
            _check(item, extra, root, where, out)


def errors_in(value: Any, schema: dict[str, Any], root: dict[str, Any], at: str) -> list[str]:
    out: list[str] = []
    _check(value, schema, root, at, out)
    return out


def _closest(value: Any, options: list[dict[str, Any]], root: dict[str, Any], at: str) -> str:
    """The problems of the alternative ``value`` comes nearest to."""
    found = min((errors_in(value, s, root, at) for s in options), key=len)
    return "; ".join(found[:5])


def check_keywords(schema: dict[str, Any], at: str = "$") -> None:
    """Refuse a schema using a keyword this validator does not check, anywhere in it."""
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise ValueError(f"unsupported keyword(s) {sorted(unknown)} at {at}")
    for key in ("properties", "$defs"):
        for name, sub in schema.get(key, {}).items():
            check_keywords(sub, f"{at}.{key}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            check_keywords(schema[key], f"{at}.{key}")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key, [])):
            check_keywords(sub, f"{at}.{key}[{i}]")


def schema_files() -> dict[str, Path]:
    """The shipped schema files, by name."""
    here = Path(__file__).resolve().parents[2] / "cudafix" / "data" / "schemas"
    return {p.name.removesuffix(".schema.json"): p for p in sorted(here.glob("*.schema.json"))}
