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
    # downloads and distribution serve data (floor 1) and the floors above: a room of theirs
    # would reach data into it (docs/architecture.md)
    wrong = {name: sorted(set(_imported_rooms(PACKAGE / f"{name}.py")))
             for name in ("downloads", "distribution")}
    assert wrong == {"downloads": [], "distribution": []}
