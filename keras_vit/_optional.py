"""Optional packages, imported where they are used, after the checks that can refuse the input.

A missing one is reported with the ``keras-vit-paper`` extra that installs it (pyproject.toml)
and the plain pip package, so that the error says what to do.
"""

import importlib

# import name -> (pip package, the keras-vit-paper extra that installs it)
PACKAGES = {
    "jax2onnx": ("jax2onnx", "interop"),
    "keras_hub": ("keras-hub", "hub"),
    "matplotlib": ("matplotlib", "inspection"),
    "onnx": ("onnx", "interop"),
    "safetensors": ("safetensors", "interop"),
    "sklearn": ("scikit-learn", "train"),
    "tensorflow": ("tensorflow", "tensorflow"),
    "tensorflow_datasets": ("tensorflow-datasets", "tfds"),
    "tf2onnx": ("tf2onnx", "interop"),
    "torch": ("torch", "torch"),
}


def install_hint(module, extra=None):
    """``pip install "keras-vit-paper[extra]"`` (or the package) for the top package of
    ``module``; ``extra`` when another extra than the package's own fits the use better."""
    package, own = PACKAGES[module.partition(".")[0]]
    return f'pip install "keras-vit-paper[{extra or own}]" (or pip install {package})'


def need(module, purpose, extra=None):
    """Import ``module`` (e.g. ``"safetensors.numpy"``) for ``purpose``.

    Raises ``ModuleNotFoundError`` naming the extra to install when the package is missing (a
    module missing inside an installed package is raised as it is).
    """
    top = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as error:
        # A missing package: ModuleNotFoundError for it, or an ImportError without a name (an
        # import hook that refuses it); another module missing inside it is not ours to explain.
        if error.name is not None and error.name.partition(".")[0] != top:
            raise
        found = "" if isinstance(error, ModuleNotFoundError) else f" (import failed: {error})"
        raise ModuleNotFoundError(f"{purpose} needs {PACKAGES[top][0]}{found}: "
                                  f"{install_hint(module, extra)}.", name=top) from error
