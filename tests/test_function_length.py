"""No function or method of the package or of its benchmarks is over 60 lines, docstring included:
a longer one is split into steps with names of their own."""

import ast
import pathlib
import textwrap

import pytest

import keras_vit

pytestmark = pytest.mark.backend_independent  # the source's function lengths

PACKAGE = pathlib.Path(keras_vit.__file__).parent
BENCHMARKS = pathlib.Path(__file__).parent.parent / "benchmarks"
LIMIT = 60


def long_functions(source, limit=LIMIT):
    """``(line, name, length)`` of each function or method of ``source`` over ``limit`` lines,
    counted from its ``def`` to its last line (nested functions count in their parent too)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                yield node.lineno, node.name, length


def _function(name, lines):
    return f"def {name}():\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 1))


def test_the_count_finds_a_long_method():
    method = textwrap.indent(_function("long", 61), "    ")
    source = _function("short", 60) + "\n\nclass A:\n    @staticmethod\n" + method
    assert list(long_functions(source)) == [(65, "long", 61)]  # its def, under the decorator


def test_no_function_is_over_60_lines():
    found = [f"{path.relative_to(PACKAGE)}:{line} {name} ({length} lines)"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line, name, length in long_functions(path.read_text())]
    assert not found, "\n".join(found)


def test_no_benchmark_function_is_over_60_lines():
    found = [f"benchmarks/{path.name}:{line} {name} ({length} lines)"
             for path in sorted(BENCHMARKS.glob("*.py"))
             for line, name, length in long_functions(path.read_text())]
    assert found == [], "\n".join(found)
