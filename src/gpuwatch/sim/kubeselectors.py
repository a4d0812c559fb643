"""Field and label selectors as the Kubernetes API server parses them, as predicates on JSON objects."""

import re
from collections.abc import Callable, Collection
from typing import Any

JsonObject = dict[str, Any]
Predicate = Callable[[JsonObject], bool]
# Fields the server reads as a default when the object leaves them out.
FIELD_DEFAULTS = {"spec.hostNetwork": "false", "spec.unschedulable": "false"}


class SelectorError(ValueError):
    """A selector the API server answers with 400 Bad Request."""


_FIELD_TERM = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$")
_LABEL_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_LABEL_EQ = re.compile(rf"^\s*({_LABEL_KEY})\s*(==|!=|=)\s*({_LABEL_VALUE})\s*$")
_LABEL_SET = re.compile(rf"^\s*({_LABEL_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_LABEL_EXISTS = re.compile(rf"^\s*(!?)\s*({_LABEL_KEY})\s*$")


def field_value(obj: JsonObject, path: str) -> str:
    """The string a field selector compares for `path` ("spec.nodeName"), as the server renders it."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return FIELD_DEFAULTS.get(path, "")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str, supported: Collection[str]) -> list[Predicate]:
    """Predicates of a fieldSelector ("status.phase=Running,spec.nodeName!=n1") on the `supported` fields."""
    out: list[Predicate] = []
    for term in (t for t in text.split(",") if t.strip()):
        match = _FIELD_TERM.match(term)
        if match is None:
            raise SelectorError(f"invalid field selector: {term!r}: expected an operator ('=', '==' or '!=')")
        field, op, wanted = match.groups()
        if field not in supported:
            raise SelectorError(f"field label not supported: {field}")

        def pred(
            obj: JsonObject, field: str = field, wanted: str = wanted, negate: bool = op == "!="
        ) -> bool:
            return (field_value(obj, field) == wanted) != negate

        out.append(pred)
    return out


def _split_terms(text: str) -> list[str]:
    """Split a label selector on the commas that are not inside `in (...)` value sets."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def parse_label_selector(text: str) -> list[Predicate]:
    """Predicates of a labelSelector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`."""
    out: list[Predicate] = []

    def labels(obj: JsonObject) -> dict[str, str]:
        found = obj.get("metadata", {}).get("labels") if isinstance(obj.get("metadata"), dict) else None
        return found if isinstance(found, dict) else {}

    for term in _split_terms(text):
        if m := _LABEL_EQ.match(term):
            key, op, value = m.groups()

            def eq(obj: JsonObject, key: str = key, value: str = value, negate: bool = op == "!=") -> bool:
                return (labels(obj).get(key) == value) != negate

            out.append(eq)
        elif m := _LABEL_SET.match(term):
            key, op, raw = m.groups()
            values = frozenset(v.strip() for v in raw.split(","))

            def member(
                obj: JsonObject, key: str = key, values: frozenset[str] = values, negate: bool = op == "notin"
            ) -> bool:
                return (labels(obj).get(key) in values) != negate

            out.append(member)
        elif m := _LABEL_EXISTS.match(term):
            bang, key = m.groups()

            def exists(obj: JsonObject, key: str = key, negate: bool = bang == "!") -> bool:
                return (key in labels(obj)) != negate

            out.append(exists)
        else:
            raise SelectorError(f"unable to parse requirement: {term.strip()!r}: invalid label selector")
    return out
