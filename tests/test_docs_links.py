"""Links between the docs pages (and from README.md) point at pages and headings that exist.

``mkdocs build --strict`` catches this too, but mkdocs is not a test dependency; this check is the
part of it that breaks when a section is renamed. Anchors follow mkdocs' ``toc`` slugs: lower case,
punctuation dropped, spaces as hyphens.
"""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\((?!https?:|mailto:)([^)#\s]*\.md)?(?:#([^)\s]+))?\)")


def _slug(heading: str) -> str:
    text = re.sub(r"[`*]|<[^>]+>", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def test_slugs_follow_mkdocs() -> None:
    assert _slug("Sparse vector in RDP and PLD sessions") == "sparse-vector-in-rdp-and-pld-sessions"
    assert _slug("Output-DP settlement (ex-post charging)") == "output-dp-settlement-ex-post-charging"
    assert _slug("Per-unit budgets: the individual Rényi filter") == "per-unit-budgets-the-individual-renyi-filter"
    assert _slug("Row-level steps: `filter`, `with_columns`") == "row-level-steps-filter-with_columns"


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.md"], ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target, anchor in LINK.findall(text):
        if not target and not anchor:
            continue
        doc = (page.parent / target) if target else page
        if not doc.exists():
            broken.append(f"{target} (no such page)")
        elif anchor and anchor not in _anchors(doc):
            broken.append(f"{target}#{anchor} (no such heading)")
    assert not broken, f"{page.name}: {broken}"
