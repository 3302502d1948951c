"""The promise that nothing but the tensorflow-datasets datasets needs TensorFlow."""

import os

from tests.blocked_imports import ROOT, run_without


def test_offline_path_and_cli_need_no_tensorflow():
    result = run_without({"tensorflow", "tensorflow_datasets"}, """
import keras_vit, keras_vit.data, keras_vit.training, keras_vit.inspection, keras_vit.app.cli
from keras_vit import data
x, y = data.as_arrays(data.load("digits", "test", batch_size=64))
assert x.shape == (899, 8, 8, 1)
assert data.load("digits", "train", batch_size=8, examples_per_class=2)[0][0].shape[0] == 8
assert "tensorflow" not in sys.modules
for bad in ([1, 2], None):  # not a tf.data.Dataset: refused without TensorFlow
    try:
        data.pipeline(bad, batch_size=2, image_size=8, num_classes=2, training=False)
    except TypeError as error:
        print("REFUSED", error)
try:
    data.load("cifar10", batch_size=8, augmentation="bogus")
except ValueError as error:
    print("REFUSED", error)
try:
    data.load("cifar10", batch_size=8)
except ModuleNotFoundError as error:
    print("ERROR", error)
assert "tensorflow" not in sys.modules
""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "takes Examples (from_arrays, load_examples) or a tf.data.Dataset, got list" \
        in result.stdout
    assert "got NoneType" in result.stdout
    assert "REFUSED Unknown augmentation 'bogus'" in result.stdout
    assert 'needs tensorflow: pip install "keras-vit-paper[tfds]"' in result.stdout


def test_without_tensorflow_only_the_command_picks_an_installed_backend(tmp_path):
    """A library import leaves the backend to Keras and the user; the command picks one."""
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(PYTHONPATH=ROOT, HOME=str(tmp_path), KERAS_HOME=str(tmp_path / "keras"))
    result = run_without({"tensorflow"}, (
        "import os, keras_vit\n"
        "assert 'KERAS_BACKEND' not in os.environ\n"
        "from keras_vit.app import backend_choice\n"
        "print(backend_choice.choose_backend({'KERAS_HOME': os.environ['KERAS_HOME']}))"), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    from keras_vit.app import backend_choice

    expected = next(b for b in backend_choice.FASTEST[backend_choice.accelerator()]
                    if b != "tensorflow" and backend_choice.installed(b))
    assert result.stdout.split()[-1] == expected


def test_a_run_on_a_tfds_dataset_says_what_to_install_before_it_downloads(tmp_path):
    """Colab's TPU runtime has no TensorFlow: the official Colab's fine-tune (notebook 05's
    appendix) names the install before it fetches a 400 MB checkpoint, and leaves no run folder
    behind."""
    output = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND="jax", KERAS_HOME=str(tmp_path / "keras"),
               KERAS_VIT_MIRROR="http://127.0.0.1:9")  # a download first: ConnectionError, exit 1
    result = run_without({"tensorflow", "tensorflow_datasets"}, f"""
from keras_vit.app import finetune
try:
    finetune.finetune({{"recipe": "vit_jax-colab-b32-cifar10", "output": {str(output)!r}}})
except ModuleNotFoundError as error:
    print("REFUSED", error)
""", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'REFUSED The tf.data path' in result.stdout
    assert 'needs tensorflow: pip install "keras-vit-paper[tfds]"' in result.stdout
    assert not output.exists()
