"""Run a notebook's code cells in order, in one namespace, without Jupyter: ``python run_notebook.py NB.ipynb``.

Each cell's output is what a notebook shows: printed text, and the last expression's rich repr
(``_repr_html_``, a matplotlib figure as PNG, else its ``repr``). ``--write`` stores the outputs in the
notebook, so that it renders with them (on GitHub, in the docs). The test suite runs
``examples/notebook.ipynb`` through :func:`execute` (tests/analyst/test_notebook.py).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any


def _rich(value: Any) -> dict[str, str]:
    """The notebook's display data of ``value``."""
    data = {"text/plain": repr(value)}
    if hasattr(value, "_repr_html_"):
        data["text/html"] = value._repr_html_()
    figure = getattr(value, "figure", None)
    if figure is not None and hasattr(figure, "savefig"):
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        data["image/png"] = base64.b64encode(buffer.getvalue()).decode()
    return data


def execute(path: Path) -> list[list[dict[str, Any]]]:
    """Run every code cell of the notebook at ``path`` in order; the outputs of each code cell."""
    import matplotlib

    matplotlib.use("Agg")
    notebook = json.loads(path.read_text(encoding="utf-8"))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    outputs = []
    for count, cell in enumerate(c for c in notebook["cells"] if c["cell_type"] == "code"):
        tree = ast.parse("".join(cell["source"]))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(tree, f"<cell {count + 1}>", "exec"), namespace)
            value = eval(compile(ast.Expression(last.value), f"<cell {count + 1}>", "eval"), namespace) \
                if last is not None else None
        out: list[dict[str, Any]] = []
        if printed.getvalue():
            out.append({"output_type": "stream", "name": "stdout", "text": printed.getvalue().splitlines(True)})
        if value is not None:
            out.append({"output_type": "execute_result", "execution_count": count + 1, "metadata": {},
                        "data": _rich(value)})
        outputs.append(out)
    return outputs


def main(argv: list[str]) -> None:
    """Run the notebook; with ``--write``, store its outputs in it."""
    path = Path(argv[0])
    outputs = execute(path)
    if "--write" in argv:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        for i, (cell, out) in enumerate(zip(code, outputs, strict=True)):
            cell["outputs"], cell["execution_count"] = out, i + 1
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"ran {len(outputs)} cells of {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
