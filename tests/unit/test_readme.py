"""The "Handler settings" table (docs/configuration.md) says what `HandlerConfig` does: every key,
every default; and the README stays short."""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any

from handler.config import HandlerConfig, Normalize
from tests.support import ROOT

README = ROOT / "README.md"
SETTINGS = ROOT / "docs" / "configuration.md"
#: Defaults the table describes in words rather than as the value (the value, the words).
IN_WORDS = {"normalize": (Normalize(), "identity"), "output_names": (None, "output"), "dense_outputs": (None, "auto")}


def _settings_table() -> dict[str, str]:
    """{key: default cell} from the table under `## Handler settings`."""
    text = SETTINGS.read_text()
    start = text.index("## Handler settings")
    section = text[start:text.find("\n## ", start + 1)]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[0] in ("key", "---"):
            continue
        keys = re.findall(r"`(\w+)`", cells[0])
        defaults = cells[1].split(", ") if len(keys) > 1 else [cells[1]]
        assert len(defaults) == len(keys), f"docs/configuration.md settings row {line!r}: one default per key"
        rows.update(zip(keys, defaults, strict=True))
    return rows


def _literal(cell: str) -> Any:
    """A default as the README writes it -> a value: none, true/false, 66,355,200, `pad`."""
    text = re.sub(r"\s*\(.*\)$", "", cell).strip().strip("`")
    if text == "none":
        return None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"\d{1,3}(,\d{3})+|\d+", text):
        return int(text.replace(",", ""))
    try:
        return float(text)
    except ValueError:
        return text


def _expected(field: dataclasses.Field[Any]) -> Any:
    """A field's default in the README's terms (enums by value, tuples as lists, `auto` for one
    computed from the host)."""
    if field.metadata.get("shown"):
        return field.metadata["shown"]
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    if isinstance(default, enum.Enum):
        return default.value
    if isinstance(default, (tuple, list)):
        return [d.value if isinstance(d, enum.Enum) else d for d in default]
    if isinstance(default, (set, frozenset)):
        return sorted(d.value if isinstance(d, enum.Enum) else d for d in default)
    return default


def test_every_handler_key_has_a_row_with_its_default():
    rows = _settings_table()
    for field in dataclasses.fields(HandlerConfig):
        expected = _expected(field)
        assert field.name in rows, (
            f"docs/configuration.md's 'Handler settings' table has no row for handler key `{field.name}` "
            f"(HandlerConfig default: {expected!r}): add `| \\`{field.name}\\` | <default> | <meaning> |`")
        cell = rows[field.name]
        if field.name in IN_WORDS:
            value, words = IN_WORDS[field.name]
            assert (expected, _literal(cell)) == (value, words), (field.name, cell, expected)
        elif isinstance(expected, list):  # a tuple default as `a`, `b`; a set in any order
            shown = [_literal(c) for c in cell.split(", ")]
            if isinstance(field.default, (set, frozenset)):
                shown = sorted(shown)
            assert shown == expected, (
                f"docs/configuration.md says `{field.name}` defaults to {cell!r}; HandlerConfig says {expected!r}")
        else:
            assert _literal(cell) == expected, (
                f"docs/configuration.md says `{field.name}` defaults to {cell!r}; HandlerConfig says {expected!r}")


def test_every_row_is_a_handler_key():
    known = {f.name for f in dataclasses.fields(HandlerConfig)}
    stale = sorted(set(_settings_table()) - known)
    assert not stale, f"docs/configuration.md's 'Handler settings' table documents {stale}, which HandlerConfig does not have"


def test_the_table_parser_reads_what_the_readme_writes():
    assert [_literal(c) for c in ("none", "none (10000 in the demo archives)", "false", "66,355,200",
                                  "`pad`", "3840", "0.5")] == [None, None, False, 66355200, "pad", 3840, 0.5]
    rows = _settings_table()
    assert (rows["max_width"], rows["max_height"]) == ("3840", "2160")


#: A newcomer reads the README in ten minutes; the rest lives in docs/ (issue 18).
README_MAX_LINES = 250


def test_the_readme_stays_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move a topic to its page under docs/ "
        "and leave a line in the README's Documentation index")


def test_every_docs_page_has_a_line_in_the_readme_index():
    text = README.read_text()
    index = text[text.index("\n## Documentation\n"):].split("\n## ", 2)[1]
    missing = sorted(page.name for page in (ROOT / "docs").glob("*.md") if f"(docs/{page.name})" not in index)
    assert not missing, f"README.md's Documentation index has no line for docs/{', docs/'.join(missing)}"
