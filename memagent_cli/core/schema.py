"""Answers as data (`--schema`): the shape a run's final answer takes.

This module owns the answer schema: reading it (a JSON Schema file, inline JSON, or llm's concise
form `'invoice_number, date, total float, paid bool'`), refusing what the grammar that constrains
the answer cannot enforce, the question and the instructions a schema gives the final prompt, the
schema of what the model writes (`wire`), and reading a reply back into validated data.

The memory updates never see the schema: their prompts stay the protocol's, byte for byte. As
QwenLong-L1.5 splits a query into its core and its formatting instructions, the schema reaches only
the final prompt, as instructions; the engine then generates that answer under it (a llama.cpp
grammar, or a served engine's `response_format`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EXIT_USAGE, MemagentError

CONCISE_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}

# Keywords that constrain a value but that llama.cpp's JSON-Schema-to-grammar conversion ignores:
# an answer generated under the grammar could break them, so a schema using one is refused.
UNENFORCEABLE = (
    "not",
    "if",
    "then",
    "else",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "patternProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minProperties",
    "maxProperties",
)
# Keywords whose values are schemas (or maps or lists of them): where the check looks further.
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties")

# The instructions the final prompt gets: what the test model (tests/data/train_schema.py) is trained on.
INSTRUCTIONS = "Answer with JSON only, matching this JSON Schema:\n{schema}"
MULTI_KEY = "items"  # --schema-multi: the model writes {"items": [...]} (an object, as every server accepts)


def _usage(message: str, hint: str) -> MemagentError:
    return MemagentError(message, hint, exit_code=EXIT_USAGE)


@dataclass(frozen=True)
class AnswerSchema:
    """The JSON Schema of one answer object (`item`), and whether the answer is a list of them."""

    item: dict[str, Any]
    multi: bool = False

    @property
    def fields(self) -> list[str]:
        return list(self.item["properties"])

    def wire(self) -> dict[str, Any]:
        """The schema of the text the model writes."""
        if not self.multi:
            return self.item
        return {"type": "object", "properties": {MULTI_KEY: {"type": "array", "items": self.item}}, "required": [MULTI_KEY]}

    def wire_json(self) -> str:
        return json.dumps(self.wire(), ensure_ascii=False, separators=(",", ":"))

    def instructions(self) -> str:
        return INSTRUCTIONS.format(schema=self.wire_json())

    def question(self) -> str:
        """A question for the memory updates when the user asked none: the fields, by name and description."""
        parts = []
        for name, spec in self.item["properties"].items():
            words = re.sub(r"[_\-]+", " ", name).strip()
            description = spec.get("description") if isinstance(spec, dict) else None
            parts.append(f"the {words} ({description.strip()})" if description and description.strip() else f"the {words}")
        listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        if self.multi:
            return f"List every item with {listed}."
        return f"What {'is' if len(parts) == 1 else 'are'} {listed}?"

    def read(self, reply: str) -> tuple[Any, str | None]:
        """The data in a reply, and None; or None and why it does not match the schema (one line)."""
        import jsonschema

        try:
            value = json.loads(reply)
        except json.JSONDecodeError as exc:
            return None, f"the answer is not JSON ({exc.msg} at character {exc.pos})"
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(self.wire()).iter_errors(value))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            return None, f"the answer does not match the schema{f' at {where}' if where else ''}: {error.message}"
        return (value[MULTI_KEY] if self.multi else value), None

    def complete_items(self, reply: str) -> list[Any]:
        """A list answer cut at its budget (`{"items": [{...}, {...}, {"na`): the items written
        whole that match the schema, in order, up to the first that is not."""
        import jsonschema

        start = reply.find("[")
        if not self.multi or start < 0:
            return []
        decoder, validator = json.JSONDecoder(), jsonschema.Draft202012Validator(self.item)
        items: list[Any] = []
        at = start + 1
        while True:
            while at < len(reply) and reply[at] in " \t\r\n,":
                at += 1
            try:
                value, at = decoder.raw_decode(reply, at)
            except json.JSONDecodeError:
                return items
            if not validator.is_valid(value):
                return items
            items.append(value)

    def to_config(self) -> str:
        """How a run's settings keep it (AgentConfig.answer_schema): compact JSON, in the order given:
        the fields' order is the answer's, and the schema's text is what the final prompt shows."""
        return json.dumps(self.item, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_config(cls, text: str, multi: bool) -> AnswerSchema:
        return cls(json.loads(text), multi)


def chosen_schema(single: Any, multi: Any, where: str = "") -> AnswerSchema | None:
    """The answer schema of `--schema SCHEMA` (the answer is such an object) or `--schema-multi
    SCHEMA` (a list of them), as llm takes them; a job line's, an eval item's and an MCP call's
    "schema" and "schema_multi" alike (`where` names the line or item). Each is a JSON Schema (an
    object, or its text, or a file) or the concise form; None without either."""
    flags = ('"schema"', '"schema_multi"') if where else ("--schema", "--schema-multi")
    prefix = f"{where}: " if where else ""
    if multi is False:
        multi = None
    if multi is True:  # the switch beside --schema that it was before 0.2
        raise _usage(
            f"{prefix}{flags[1]} takes the schema itself",
            f"Write {flags[1]} with the fields in place of {flags[0]} and the switch.",
        )
    if single is not None and multi is not None:
        raise _usage(f"{prefix}{flags[0]} or {flags[1]}, not both", f"{flags[1]} alone makes the answer a list of such objects.")
    spec = multi if multi is not None else single
    if spec is None:
        return None
    if not isinstance(spec, (dict, str)):
        raise _usage(f"{prefix}{flags[1] if multi is not None else flags[0]} is a JSON Schema object or a string of fields", "")
    try:
        return parse_schema(json.dumps(spec) if isinstance(spec, dict) else spec, multi is not None)
    except MemagentError as exc:
        if not where:
            raise
        raise _usage(f"{where}: {exc.message}", exc.hint or "") from None


def parse_schema(spec: str, multi: bool = False) -> AnswerSchema:
    """SCHEMA as the user gave it: a JSON Schema file, inline JSON (starts with `{`), or the concise
    form. Raises MemagentError (exit 2) with one line for anything that cannot be used."""
    text = spec.strip()
    if not text:
        raise _usage("--schema is empty", "Give a JSON Schema file, inline JSON, or fields such as 'name, total float'.")
    if text.startswith("{"):
        item = _load_json(text, "--schema")
    elif _looks_like_path(text):
        try:
            raw = Path(text).expanduser().read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise _usage(
                f"The schema file {text} does not exist", "Check the path, or give the fields inline: 'name, total float'."
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise _usage(f"Cannot read the schema file {text}: {exc}", "Give a UTF-8 JSON file.") from None
        item = _load_json(raw, f"The schema file {text}")
    else:
        item = concise_schema(text)
    return AnswerSchema(check_schema(item), multi)


def _looks_like_path(text: str) -> bool:
    """A file that is there, or a name no concise form has (one word ending in .json): a concise
    form's description may hold a slash ('date: dd/mm/yyyy')."""
    return Path(text).expanduser().is_file() or (text.endswith(".json") and not re.search(r"[,\s]", text))


def _load_json(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _usage(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", "Fix the JSON.") from None
    if not isinstance(value, dict):
        raise _usage(
            f"{what} is not a JSON Schema object", 'A schema is an object such as {"type": "object", "properties": {…}}.'
        )
    return value


def concise_schema(text: str) -> dict[str, Any]:
    """llm's concise form: fields separated by commas (or by newlines, when there are any, so that
    descriptions may hold commas); each `name [type][: description]`, the type one of str (the
    default), int, float, bool. Every field is required."""
    properties: dict[str, Any] = {}
    for part in text.splitlines() if "\n" in text else text.split(","):
        field, _, description = part.partition(":")
        words = field.split()
        if not words:
            if description.strip():
                raise _usage(
                    f"A field of --schema has a description but no name: {part.strip()!r}", "Write 'name type: description'."
                )
            continue
        if len(words) > 2 or not re.fullmatch(r"[A-Za-z_][\w\-]*", words[0]):
            raise _usage(
                f"Cannot read the field {field.strip()!r} in --schema",
                "Each field is a name, then optionally a type: 'total float'.",
            )
        kind = words[1] if len(words) == 2 else "str"
        if kind not in CONCISE_TYPES:
            raise _usage(
                f"Unknown type {kind!r} for the field {words[0]} in --schema", f"The types are {', '.join(CONCISE_TYPES)}."
            )
        if words[0] in properties:
            raise _usage(f"The field {words[0]} is named twice in --schema", "Name each field once.")
        spec: dict[str, Any] = {"type": CONCISE_TYPES[kind]}
        if description.strip():
            spec["description"] = description.strip()
        properties[words[0]] = spec
    return {"type": "object", "properties": properties, "required": list(properties)}


def check_schema(item: dict[str, Any]) -> dict[str, Any]:
    """A schema the answer can be generated under: valid JSON Schema, an object with properties,
    nothing the grammar cannot enforce, no reference outside the schema itself."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(item)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise _usage(
            f"--schema is not a valid JSON Schema{f' at {where}' if where else ''}: {exc.message}", "Fix the schema."
        ) from None
    if item.get("type", "object") != "object" or not isinstance(item.get("properties"), dict) or not item["properties"]:
        raise _usage(
            "--schema has no properties: the answer must be an object with named fields",
            "Name the fields: 'name, total float', or a JSON Schema with \"properties\" (--schema-multi makes it a list).",
        )
    _check_keywords(item, "")
    return item


def _check_keywords(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        return
    for keyword in UNENFORCEABLE:
        if keyword in schema:
            raise _usage(
                f"--schema uses {keyword!r}{f' at {where}' if where else ''}, which the answer's grammar cannot enforce",
                "Remove it (check the value after the run instead).",
            )
    ref = schema.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        raise _usage(f"--schema refers to {ref!r}: memagent reads no schema but the one given", "Put the definition in $defs.")
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                _check_keywords(sub, f"{where}/{key}/{name}" if where else f"{key}/{name}")
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                _check_keywords(sub, f"{where}/{key}/{i}" if where else f"{key}/{i}")
    for key in _SUBSCHEMAS:
        _check_keywords(schema.get(key), f"{where}/{key}" if where else key)
