"""A keras_vit file loads with ``keras.saving.load_model`` in a fresh process after a plain
``import keras_vit``, before or after Keras, though keras_vit's modules load on first use
(``keras_vit._registration``)."""

import importlib
import json
import os
import pkgutil
import subprocess
import sys

import keras
import numpy as np

import keras_vit
from keras_vit import _optional, _registration
from keras_vit.training import recipes
from tests.conftest import installed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "keras")

# Loads what the test saved, in a fresh interpreter; argv: the import order, then the files.
_LOAD = """
import json, sys
first, new, compiled, old = sys.argv[1:]
if first == "keras_vit":
    import keras_vit, keras
else:
    import keras, keras_vit
import numpy as np
results = {"keras_first": first == "keras"}
io = np.load(new.replace(".keras", "_io.npz"))
model = keras.saving.load_model(new)
results["class"] = type(model).__module__ + "." + type(model).__name__
logits = keras.ops.convert_to_numpy(model(io["images"]))
results["error"] = float(np.abs(logits - io["outputs"]).max())
trained = keras.saving.load_model(compiled)
results["optimizer"] = type(trained.optimizer).__name__
results["schedule"] = trained.optimizer.get_config()["learning_rate"]["class_name"]
try:
    keras.saving.load_model(old)
except ValueError as error:
    results["old"] = str(error)
print(json.dumps(results))
"""


def _every_registration():
    """``{registered name: module}`` of keras_vit's classes, every library module imported, and
    the modules that could not be, for an optional package this environment lacks
    (``keras_vit.data.tfdata`` without TensorFlow)."""
    unavailable = set()
    for info in pkgutil.walk_packages(keras_vit.__path__, "keras_vit."):
        if info.name.startswith("keras_vit.app"):  # the application registers nothing
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            if error.name not in _optional.PACKAGES or installed(error.name):
                raise
            unavailable.add(info.name)
    registered = {name: cls.__module__ for name, cls in keras.saving.get_custom_objects().items()
                  if name.startswith("keras_vit>") and cls.__module__ != _registration.__name__}
    return registered, unavailable


def test_the_table_names_every_registered_class_and_its_module():
    table = {f"keras_vit>{name}": module for module, names in _registration.classes().items()
             for name in names}
    registered, unavailable = _every_registration()
    assert registered == {name: module for name, module in table.items()
                          if module not in unavailable}
    assert unavailable <= ({"keras_vit.data.tfdata"} if not installed("tensorflow") else set())


def _compiled_file(tmp_path):
    model = keras_vit.ViTImageClassifier(image_size=8, patch_size=4, hidden_size=8,
                                         num_layers=1, num_heads=2, mlp_dim=16, num_classes=3)
    model.compile(recipes.finetuning_optimizer(10, warmup_steps=2, decay="linear"),
                  recipes.classification_loss())
    images = np.zeros((2, 8, 8, 3), "float32")
    model.fit(images, np.eye(3)[[0, 1]], verbose=0)
    path = str(tmp_path / "compiled.keras")
    model.save(path)
    return path


def test_a_fresh_process_loads_keras_vit_files_in_either_import_order(tmp_path):
    files = [os.path.join(FIXTURES, "vit_token_learned_1d.keras"), _compiled_file(tmp_path),
             os.path.join(FIXTURES, "flat_config", "vit_token_learned_1d.keras")]
    environ = dict(os.environ, PYTHONPATH=ROOT)
    for first in ("keras_vit", "keras"):
        done = subprocess.run([sys.executable, "-c", _LOAD, first, *files], env=environ,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        results = json.loads(done.stdout.splitlines()[-1])
        assert results["class"] == "keras_vit.models.vit.ViTImageClassifier"
        assert results["error"] < 1e-5
        assert (results["optimizer"], results["schedule"]) == ("TraceSGD", "WarmupLinearDecay")
        assert "keras_vit.models.upgrade.upgrade_keras_file" in results["old"]


def test_import_keras_vit_leaves_one_finder_and_the_finder_only_answers_keras():
    finders = [f for f in sys.meta_path if isinstance(f, _registration._KerasImport)]
    assert finders == []  # this process imported Keras first: the stand-ins are registered
    assert _registration._KerasImport().find_spec("numpy") is None
    stand_in = _registration.stand_ins()["keras_vit>ViTBackbone"]
    backbone = keras_vit.ViTBackbone(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
                                     num_heads=2, mlp_dim=16)
    rebuilt = stand_in.from_config(backbone.get_config())
    assert type(rebuilt) is keras_vit.ViTBackbone and rebuilt.config == backbone.config
