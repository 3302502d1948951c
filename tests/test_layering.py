"""Data flows one way (docs/architecture.md): no module imports from a package above its own, or
beside it on its layer, however it imports: by statement, by name at run time
(``importlib.import_module("keras_vit.x")``, ``__import__``, ``keras_vit._optional.need``, the
name written out or held in a module-level constant) or by attribute of the package
(``keras_vit.x.y`` after ``import keras_vit``)."""

import ast
import json
import pathlib
import re

import pytest

import keras_vit

pytestmark = pytest.mark.backend_independent  # the imports between packages, read from the source

PACKAGE = pathlib.Path(keras_vit.__file__).parent
ROOT = "keras_vit"  # the package root: the public names, above every layer
# The packages each package must not import (at module level or inside a function): those above it
# and those beside it on its layer (docs/architecture.md). ``pretrained`` is a module that
# stands on layer 3's packages (it loads checkpoints into models and counts their weights).
FORBIDDEN = {
    "layers": {"data", "models", "checkpoints", "costs", "pretrained", "training", "evaluation",
               "inspection", "app"},
    "data": {"layers", "models", "checkpoints", "costs", "pretrained", "training", "evaluation",
             "inspection", "app"},
    "models": {"checkpoints", "costs", "pretrained", "training", "evaluation", "inspection",
               "app"},
    "checkpoints": {"costs", "pretrained", "training", "evaluation", "inspection", "app"},
    "costs": {"checkpoints", "pretrained", "training", "evaluation", "inspection", "app"},
    "pretrained": {"training", "evaluation", "inspection", "app"},
    "training": {"evaluation", "inspection", "app"},
    "evaluation": {"training", "inspection", "app"},
    "inspection": {"training", "evaluation", "app"},
}
# The modules at the package's top that serve several layers and import no package.
SERVING = {"checks", "downloads", "distribution"}
# Calls that import the module their first argument names: importlib's, the built-in, keras_vit's
# import of an optional package, pkgutil's ("module:attribute").
IMPORTERS = {"import_module", "__import__", "need", "resolve_name"}
# The modules that import by a name made at run time: the package root (its public names, read
# from its constants), the lazy submodules, the optional packages, Keras' stand-ins and the hooks
# (the module the package root names). Anywhere else a name the test cannot read is refused.
DYNAMIC = {ROOT, "keras_vit._submodules", "keras_vit._optional", "keras_vit._registration",
           "keras_vit._hooks"}


def _module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name):
    relative = pathlib.Path(*name.split("."))
    return (PACKAGE.parent / relative.with_suffix(".py")).exists() or (
        PACKAGE.parent / relative / "__init__.py").exists()


def _module_of(dotted):
    """The longest keras_vit module that ``dotted`` (a module, or a name in one) starts with."""
    parts = dotted.replace(":", ".").split(".")
    for end in range(len(parts), 0, -1):
        if _is_module(".".join(parts[:end])):
            return ".".join(parts[:end])
    return ROOT


def _type_checking_only(tree):
    """The nodes under ``if TYPE_CHECKING:``, which never run."""
    return {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", None) == "TYPE_CHECKING"
            for statement in node.body for inner in ast.walk(statement)}


def _strings(node):
    """The string constants of a constant expression (a string, or a tuple, list, set or dict
    of them)."""
    return {inner.value for inner in ast.walk(node)
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str)}


def _constants(tree):
    """``{name: its strings}`` of the module-level assignments."""
    found = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = _strings(node.value)
    return found


def _named(argument, constants):
    """The names an importer's argument stands for, or None when the source does not say."""
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return {argument.value}
    if isinstance(argument, ast.Subscript):  # CONSTANT[key]: any of its values
        argument = argument.value
    if isinstance(argument, ast.Name) and argument.id in constants:
        return constants[argument.id]
    return None


def _callee(node):
    return getattr(node.func, "attr", None) or getattr(node.func, "id", None)


def _dotted(node):
    """``a.b.c`` of an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def imports(source, name, is_package=False):
    """``(modules, unreadable)``: the keras_vit modules the module ``name`` imports (at module
    level or inside a function, by statement, by name or by attribute of the package), and the
    lines of its imports by a name the source does not give."""
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(source)
    skipped, constants = _type_checking_only(tree), _constants(tree)
    modules, unreadable, by_name = set(), [], set()
    chained = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    binds_package = any(isinstance(node, ast.Import) and any(
        alias.name.split(".")[0] == ROOT and alias.asname is None for alias in node.names)
        for node in ast.walk(tree))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names if alias.name.split(".")[0] == ROOT}
        elif isinstance(node, ast.ImportFrom):
            modules |= set(_from_import(node, package))
        elif isinstance(node, ast.Call) and _callee(node) in IMPORTERS and node.args:
            named = _named(node.args[0], constants)
            if named is None:
                unreadable.append(node.lineno)
            else:
                by_name |= named
        elif binds_package and isinstance(node, ast.Attribute) and id(node) not in chained \
                and (_dotted(node) or "").split(".")[0] == ROOT:
            modules.add(_module_of(_dotted(node)))
    if unreadable:  # what the module may import: every keras_vit module its constants name
        by_name |= {text for names in constants.values() for text in names
                    if text.startswith(ROOT + ".")}
    modules |= {_module_of(text) for text in by_name
                if text == ROOT or text.startswith(ROOT + ".")}
    return modules - {name}, unreadable


def _from_import(node, package):
    base = node.module or ""
    if node.level:
        anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        base = f"{anchor}.{base}".rstrip(".")
    if base.split(".")[0] != ROOT:
        return
    for alias in node.names:
        yield f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base


def _imports_of(path):
    return imports(path.read_text(), _module_name(path), path.name == "__init__.py")


def _package(module):
    """The package (or top-level module) a keras_vit module is in; ``ROOT`` for the package
    itself."""
    return module.split(".")[1] if "." in module else ROOT


def _files(package):
    folder = PACKAGE / package
    return sorted(folder.rglob("*.py")) if folder.is_dir() else [PACKAGE / f"{package}.py"]


def test_the_reading_sees_every_way_to_import():
    source = '''
import importlib
import keras_vit.layers
from keras_vit import _optional
from . import lora
READER = "keras_vit.checkpoints.formats"
TABLE = {"a": "keras_vit.costs.memory"}

def f(kind):
    importlib.import_module(READER)
    __import__("keras_vit.training.mpp")
    _optional.need("keras_vit.pretrained", "a test")
    keras_vit.inspection.gradients.gradient
    importlib.import_module(TABLE[kind])
    importlib.import_module("keras_vit." + kind)
'''
    modules, unreadable = imports(source, "keras_vit.models.example")
    assert modules == {"keras_vit.layers", "keras_vit._optional", "keras_vit.models.lora",
                       "keras_vit.checkpoints.formats", "keras_vit.costs.memory",
                       "keras_vit.training.mpp", "keras_vit.pretrained",
                       "keras_vit.inspection.gradients"}
    assert unreadable == [15]


def test_every_package_has_its_layer():
    packages = {path.name for path in PACKAGE.iterdir()
                if (path / "__init__.py").exists()} - SERVING
    loose = {path.stem for path in PACKAGE.glob("*.py") if not path.stem.startswith("_")}
    assert packages | {"pretrained"} == {*FORBIDDEN, "app"}, (
        "give a new package its layer in FORBIDDEN")
    assert loose - SERVING == {"pretrained"}, "give a new module its layer (FORBIDDEN) or SERVING"


def test_no_package_imports_from_above():
    wrong = []
    for package, above in FORBIDDEN.items():
        for path in _files(package):
            wrong += [f"{path.relative_to(PACKAGE)} imports {module}"
                      for module in sorted(_imports_of(path)[0])
                      if _package(module) in above | {ROOT}]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_the_package_root():
    # The root's public names reach every package: importing one from inside goes up from any layer.
    wrong = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
             if path != PACKAGE / "__init__.py" and ROOT in _imports_of(path)[0]]
    assert not wrong, wrong


def test_every_import_by_name_is_readable():
    wrong = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if _module_name(path) not in DYNAMIC for line in _imports_of(path)[1]]
    assert not wrong, ("write the module's name as a string, or a module-level constant, so "
                       f"that this test reads it: {wrong}")


def test_only_the_package_root_names_what_fills_a_hook():
    # A hook (keras_vit._hooks) is how a package calls a layer above it; which module serves it is
    # written at the top, once, where every import points down.
    wrong = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
             if path != PACKAGE / "__init__.py" and any(
                 isinstance(node, ast.Call) and _callee(node) == "provided_by"
                 for node in ast.walk(ast.parse(path.read_text())))]
    assert not wrong, wrong


def test_the_library_never_imports_the_application():
    wrong = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
             if path.parts[len(PACKAGE.parts)] != "app" and path.name != "__main__.py"
             and "app" in {_package(module) for module in _imports_of(path)[0]}]
    assert not wrong, wrong


def test_the_modules_that_serve_several_layers_import_no_package():
    # checks, downloads and distribution serve layer 1 and the layers above: a package of theirs
    # would reach data into it (docs/architecture.md). The argument checks, which import
    # nothing, serve the other two as well; so do the hooks, the version, the backends' facts,
    # the attribute hook that reaches a package's modules, and the processes' roll call
    # (sockets only).
    serving = {"checks", "_backends", "_submodules"}
    wrong = {name: sorted({_package(m) for path in _files(name) for m in _imports_of(path)[0]}
                          - serving - {name})
             for name in ("downloads", "distribution", "_hooks", "_version")}
    assert wrong == {"downloads": [], "distribution": [], "_hooks": [], "_version": []}
    for name in serving:
        assert not _imports_of(PACKAGE / f"{name}.py")[0], name
    assert not _imports_of(PACKAGE / "distribution" / "_rendezvous.py")[0]


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
    # The packages' order leaves loops inside one package free; a loop of modules (a lazy import
    # in a function, or one by name, included) still means two modules that cannot be read, or
    # changed, one at a time.
    graph = {_module_name(path): _imports_of(path)[0] for path in sorted(PACKAGE.rglob("*.py"))}
    assert _circles(graph) == []


# The words of the tools that build the project, not of the project: its parts are modules,
# packages and the layers of the architecture, and its text names no issue tracker's numbers
# nor the machines its checks ran on. Every root a person reads is scanned, less what the
# documentation build writes (docs/conf.py: the API stubs, the notebooks' copies, the site).
REPOSITORY = PACKAGE.parent
SCANNED = ("keras_vit", "tests", "benchmarks", "docs", "README.md", "notebooks")
BUILT = ("docs/_build", "docs/api", "docs/tutorials")
TOOLING = re.compile(
    # not np.floor(x), ops.floor, floor = ..., nor room as space ("room for the last name")
    r"(?<![.\w])(?:rooms?|floors?)\b(?!\s*[(=])(?!\s+(?:for|to|kept|left)\b)"
    r"|\bissues? \d+|\blent GPU\b|\bdevice machine\b", re.IGNORECASE)


def _tooling_words(text):
    """``[(line number, the words)]`` of ``text`` that are the tools' vocabulary."""
    return [(number, [m.group(0) for m in TOOLING.finditer(line)])
            for number, line in enumerate(text.splitlines(), 1) if TOOLING.search(line)]


def _readable_text(path):
    """A notebook's markdown and code cells, one line each, as the file numbers them
    approximately (cell, line); any other file as it is."""
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8", errors="replace")
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    return "\n".join("".join(cell.get("source", [])) for cell in cells
                     if cell.get("cell_type") in ("markdown", "code"))


def test_the_tooling_matcher():
    assert _tooling_words("the models stand on floor 2, beside the other rooms") == [
        (1, ["floor", "rooms"])]
    assert _tooling_words("fixed in issue 38\nran on a lent GPU (the device machine)") == [
        (1, ["issue 38"]), (2, ["lent GPU", "device machine"])]
    assert _tooling_words("low = np.floor(x)\nops.floor(y) // 2\nfloor = 3") == []
    assert _tooling_words("a room of its own; the issues were fixed; a GPU lent") == [
        (1, ["room"])]
    assert _tooling_words("with room kept on the right, room for the last name") == []


def test_no_tooling_words_in_the_project():
    wrong = []
    for root in SCANNED:
        path = REPOSITORY / root
        found = [path] if path.is_file() else sorted(
            p for p in path.rglob("*") if p.suffix in (".py", ".md", ".ipynb", ".toml", ".txt")
            and ".ipynb_checkpoints" not in p.parts
            and not str(p.relative_to(REPOSITORY)).startswith(BUILT)) if path.is_dir() else []
        for file in found:
            if file == pathlib.Path(__file__):
                continue  # this test names the words it looks for
            wrong += [f"{file.relative_to(REPOSITORY)}:{number}: {', '.join(words)}"
                      for number, words in _tooling_words(_readable_text(file))]
    assert not wrong, "say module, package or layer; drop issue numbers:\n" + "\n".join(wrong)
