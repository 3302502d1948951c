"""Data flows one way (docs/architecture.md): no module imports from a room above its own, or
beside it on its floor."""

import ast
import pathlib

import pytest

import keras_vit

pytestmark = pytest.mark.backend_independent  # the imports between rooms, read from the source

PACKAGE = pathlib.Path(keras_vit.__file__).parent
# The rooms each room must not import (at module level or inside a function): those above it
# and those beside it on its floor (docs/architecture.md).
FORBIDDEN = {
    "layers": {"data", "models", "checkpoints", "costs", "training", "evaluation", "inspection",
               "app"},
    "data": {"layers", "models", "checkpoints", "costs", "training", "evaluation", "inspection",
             "app"},
    "models": {"checkpoints", "costs", "training", "evaluation", "inspection", "app"},
    "checkpoints": {"costs", "training", "evaluation", "inspection", "app"},
    "costs": {"checkpoints", "training", "evaluation", "inspection", "app"},
    "training": {"evaluation", "inspection", "app"},
    "evaluation": {"training", "inspection", "app"},
    "inspection": {"training", "evaluation", "app"},
}


def _imported_rooms(path):
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "keras_vit" and len(parts) > 1:
                yield parts[1]


def test_every_room_has_its_floor():
    rooms = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert rooms == {*FORBIDDEN, "app"}, "give a new room its floor in FORBIDDEN"


def test_no_room_imports_from_above():
    wrong = []
    for room, above in FORBIDDEN.items():
        for path in sorted((PACKAGE / room).rglob("*.py")):
            wrong += [f"{path.relative_to(PACKAGE)} imports keras_vit.{r}"
                      for r in _imported_rooms(path) if r in above]
    assert not wrong, "\n".join(wrong)


def test_the_library_never_imports_the_application():
    wrong = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
             if path.parts[len(PACKAGE.parts)] != "app" and "app" in set(_imported_rooms(path))
             and path.name != "__main__.py"]
    assert not wrong, wrong


def test_the_modules_that_serve_several_floors_import_no_room():
    # checks, downloads and distribution serve floor 1 and the floors above: a room of theirs
    # would reach data into it (docs/architecture.md). The argument checks, which import
    # nothing, serve the other two as well.
    wrong = {name: sorted(set(_imported_rooms(PACKAGE / f"{name}.py")) - {"checks"})
             for name in ("downloads", "distribution")}
    assert wrong == {"downloads": [], "distribution": []}
    assert not set(_imported_rooms(PACKAGE / "checks.py"))


def _module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name):
    relative = pathlib.Path(*name.split("."))
    return (PACKAGE.parent / relative.with_suffix(".py")).exists() or (
        PACKAGE.parent / relative / "__init__.py").exists()


def _type_checking_only(tree):
    """The nodes under ``if TYPE_CHECKING:``, which never run."""
    return {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", None) == "TYPE_CHECKING"
            for statement in node.body for inner in ast.walk(statement)}


def _imported_modules(path):
    """The keras_vit modules ``path`` imports, at module level or inside a function."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("keras_vit"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            if base.split(".")[0] != "keras_vit":
                continue
            for alias in node.names:
                yield f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base


def _circles(graph):
    """Every set of modules that import one another in a loop (Tarjan's strongly connected
    components of more than one module, or a module importing itself)."""
    index, low, stack, found = {}, {}, [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others():
    # The rooms' order leaves loops inside one room free; a loop of modules (a lazy import in a
    # function included) still means two modules that cannot be read, or changed, one at a time.
    graph = {_module_name(path): set(_imported_modules(path))
             for path in sorted(PACKAGE.rglob("*.py"))}
    assert _circles(graph) == []
