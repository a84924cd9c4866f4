"""Every public name is documented: ``dp.__all__`` in docs/reference.md; every signature a page shows is the code's.

(Hooks: tests/plugins/test_registry_policy.py.)
"""

import ast
import inspect
import re
from pathlib import Path

import pytest

import dpframe as dp

REFERENCE = (Path(__file__).resolve().parent.parent / "docs" / "reference.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(dp.__all__))
def test_public_name_is_in_the_reference(name: str) -> None:
    assert f"`dp.{name}" in REFERENCE or f"`{name}(" in REFERENCE or f"`{name}`" in REFERENCE, \
        f"dp.{name} is public but docs/reference.md does not mention it"


PAGES = [Path(__file__).resolve().parent.parent / "README.md",
         *sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md"))]
SIGNATURE = re.compile(r"^(dp\.[\w.]+)\((.*)\)$")


def signature_lines(text: str) -> list[str]:
    """The lines of ``text`` blocks that show a public callable's signature, ``dp.Name(...)`` (an indented line
    continues the one before)."""
    out: list[str] = []
    for block in re.findall(r"^```text\n(.*?)^```", text, re.M | re.S):
        logical: list[str] = []
        for line in block.splitlines():
            if line[:1].isspace() and logical:
                logical[-1] += " " + line.strip()
            else:
                logical.append(line.strip())
        out += [line for line in logical if SIGNATURE.match(line)]
    return out


def mismatches(line: str) -> list[str]:
    """How the signature written in ``line`` differs from ``inspect.signature`` of what it names: the parameters
    (names, order, keyword-only after ``*``) and every default it shows."""
    name, params = SIGNATURE.match(line).groups()  # type: ignore[union-attr]
    target: object = dp
    for part in name.split(".")[1:]:
        target = getattr(target, part)
    real = [p for p in inspect.signature(target).parameters.values()  # type: ignore[arg-type]
            if p.name not in ("self", "cls")]
    shown, keyword_only, problems = [], False, []
    for item in (p.strip() for p in re.split(r",(?![^()\[\]{}]*[)\]}])", params) if p.strip()):
        if item == "*":
            keyword_only = True
            continue
        pname, _, default = (x.strip() for x in item.partition("="))
        shown.append((pname, keyword_only, default))
    if [s[0] for s in shown] != [p.name for p in real]:
        return [f"parameters {[s[0] for s in shown]}, the code has {[p.name for p in real]}"]
    for (pname, kw, default), p in zip(shown, real):
        if kw != (p.kind is inspect.Parameter.KEYWORD_ONLY):
            problems.append(f"{pname}: keyword-only is {p.kind is inspect.Parameter.KEYWORD_ONLY} in the code")
        if default and (p.default is inspect.Parameter.empty or _value(default) != p.default):
            real_default = "none" if p.default is inspect.Parameter.empty else repr(p.default)
            problems.append(f"{pname}={default}, the code's default is {real_default}")
        if not default and p.default is not inspect.Parameter.empty:
            problems.append(f"{pname} shown without its default {p.default!r}")
    return problems


def _value(default: str) -> object:
    """A default as written (a literal), or its text where it is an expression (``frozenset()``)."""
    try:
        return ast.literal_eval(default)
    except (ValueError, SyntaxError):
        return default


def test_signature_lines_are_found_and_compared() -> None:
    text = "x\n```text\ndp.PrivacyUnit(column, max_rows=None,\n    max_groups=None)\ndemo [--rows N]\n```\n"
    assert signature_lines(text) == ["dp.PrivacyUnit(column, max_rows=None, max_groups=None)"]
    assert mismatches("dp.PrivacyUnit(column, max_rows=None, max_groups=None)") == []
    assert mismatches("dp.PrivacyUnit(column, max_rows=1, max_groups=None)") == [
        "max_rows=1, the code's default is None"]
    assert mismatches("dp.PrivacyUnit(column, *, max_rows=None, max_groups=None)") == [
        "max_rows: keyword-only is False in the code", "max_groups: keyword-only is False in the code"]
    assert mismatches("dp.PrivacyUnit(column, max_rows=None)")[0].startswith("parameters ['column', 'max_rows']")
    assert mismatches("dp.Accuracy(half_width, confidence=0.95, notion=None)") == []
    assert mismatches("dp.Accuracy(half_width, confidence=(0.9, 0.95), notion=None)") == [
        "confidence=(0.9, 0.95), the code's default is 0.95"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_signatures_shown_match_the_code(page: Path) -> None:
    """A signature shown in a ``text`` block (``dp.Session(tables, *, privacy_unit, ...)``) is the callable's own."""
    wrong = {line: problems for line in signature_lines(page.read_text(encoding="utf-8"))
             if (problems := mismatches(line))}
    assert not wrong, f"{page.name}: {wrong}"
