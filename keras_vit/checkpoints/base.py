"""The machinery every checkpoint format shares: a table from file keys to model variables.

A format is described by one function ``table(model) -> {file key: Entry}``. The same table
serves both directions: ``assign`` loads a file's tensors into the model (strictly: every
missing, unexpected or mis-shaped tensor is reported in one error, and nothing is assigned
unless everything matches), and ``export`` turns the model's variables into the file's tensors.
An ``Entry`` says how one file tensor relates to one or more variables (a transpose for PyTorch
layouts, a concatenation for timm's fused ``qkv``), so no format needs code of its own for either
direction. This module builds no model (models know nothing of checkpoints); a ViT is
described by its ``ViTConfig``, which ``prepare_config`` adjusts to the loading options.
"""

import os
import shutil
import tempfile

import keras
import numpy as np

from keras_vit.layers.position import resize_position_embedding, table_grid
from keras_vit.models.description import Head


def _identity(*arrays):
    return arrays[0]


class Entry:
    """One file tensor and the model variable(s) it holds.

    Args:
        variables: a variable or a tuple of variables.
        file_shape: the tensor's shape in the file; by default the (single) variable's shape.
        to_file: ``f(*arrays) -> array`` from the variables' values to the file tensor; by
            default a reshape to ``file_shape``.
        from_file: ``f(array) -> array or tuple of arrays`` back to the variables; by default a
            reshape to the variable's shape.

    Example (a Dense kernel stored as PyTorch's (out, in) weight):
    >>> import keras
    >>> dense = keras.layers.Dense(3)
    >>> dense.build((None, 2))
    >>> torch_dense_kernel(dense.kernel).file_shape
    (3, 2)
    """

    def __init__(self, variables, file_shape=None, to_file=None, from_file=None):
        self.variables = tuple(variables) if isinstance(variables, (tuple, list)) else (variables,)
        first = tuple(self.variables[0].shape)
        self.file_shape = first if file_shape is None else tuple(file_shape)
        self._to_file = to_file
        self._from_file = from_file

    @property
    def variable(self):
        return self.variables[0]

    def accepts(self, shape):
        """Whether a file tensor of ``shape`` fits (the file shape, or a lone variable's)."""
        shape = tuple(shape)
        return shape == self.file_shape or (
            len(self.variables) == 1 and self._from_file is None
            and shape == tuple(self.variable.shape)
        )

    def expected_shape(self):
        """The shape shown in errors: the variable's, or the file's for a transformed tensor."""
        if len(self.variables) == 1 and self._from_file is None:
            return tuple(self.variable.shape)
        return self.file_shape

    def to_file(self):
        values = [keras.ops.convert_to_numpy(v) for v in self.variables]
        if self._to_file is None:
            return values[0].reshape(self.file_shape)
        return np.ascontiguousarray(self._to_file(*values))

    def from_file(self, array):
        array = np.asarray(array)
        if self._from_file is None:
            parts = (array.reshape(self.variable.shape),)
        else:
            parts = self._from_file(array)
            parts = parts if isinstance(parts, tuple) else (parts,)
        return [part.reshape(v.shape).astype(v.dtype) for part, v in zip(parts, self.variables)]


# ----------------------------------------------------------------------------- common layouts


def torch_dense_kernel(kernel):
    """A Keras (in, out) kernel stored as PyTorch's (out, in) ``Linear.weight``."""
    return Entry(kernel, tuple(kernel.shape)[::-1], np.transpose, np.transpose)


def torch_conv_kernel(kernel):
    """A Keras HWIO conv kernel stored as PyTorch's OIHW ``Conv2d.weight``."""
    h, w, i, o = kernel.shape
    return Entry(
        kernel,
        (o, i, h, w),
        lambda k: k.transpose(3, 2, 0, 1),
        lambda k: k.transpose(2, 3, 1, 0),
    )


# ----------------------------------------------------------------------------- load and save


def check(table, tensors, skip=(), what="checkpoint"):
    """Raise one ``ValueError`` listing every missing, unexpected and mis-shaped tensor."""
    skip = set(skip)
    missing = sorted(k for k in table if k not in tensors and k not in skip)
    unexpected = sorted(k for k in tensors if k not in table and k not in skip)
    misshaped = sorted(
        f"{key}: file {tuple(np.shape(tensors[key]))}, model {entry.expected_shape()}"
        for key, entry in table.items()
        if key in tensors and key not in skip and not entry.accepts(np.shape(tensors[key]))
    )
    if missing or unexpected or misshaped:
        lines = []
        for title, items in (("missing", missing), ("unexpected", unexpected),
                             ("mis-shaped", misshaped)):
            if items:
                shown = items[:20] + [f"... and {len(items) - 20} more"] * (len(items) > 20)
                lines.append(f"{len(items)} {title}:\n    " + "\n    ".join(shown))
        raise ValueError(
            f"The {what} does not match the model.\n  " + "\n  ".join(lines) + "\nCheck that "
            "the file belongs to this model family and size, or let load_checkpoint build the "
            "model from the file."
        )


def assign(table, tensors, skip=(), what="checkpoint"):
    """Load ``tensors`` into the model variables of ``table``, all or nothing."""
    check(table, tensors, skip, what)
    skip = set(skip)
    updates = []
    for key, entry in table.items():
        if key not in skip:
            updates += zip(entry.variables, entry.from_file(tensors[key]))
    for variable, value in updates:
        variable.assign(value)


def export(table):
    """``{file key: numpy array}`` of the model variables in ``table``."""
    return {key: entry.to_file() for key, entry in table.items()}


def write_atomically(path, write):
    """Call ``write(tmp_path)`` and move the result to ``path``; nothing is left on failure.

    ``path`` may be a file or a folder (``write`` then fills the folder ``tmp_path``).
    """
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=".keras_vit-", dir=parent)
    try:
        tmp = os.path.join(workdir, os.path.basename(path))
        write(tmp)
        if os.path.isdir(path) and os.path.isdir(tmp):
            for name in os.listdir(tmp):
                os.replace(os.path.join(tmp, name), os.path.join(path, name))
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def prepare_config(config, tensors, head_keys, pre_logits_keys, *, num_classes=None,
                   drop_pre_logits=False, image_size=None, overrides=None,
                   representation_size=None):
    """Apply ``load_checkpoint``'s options to an inferred description; returns
    ``(description, keys to skip)``.

    ``num_classes`` different from the file's replaces the head by a fresh one (official
    fine-tuning), ``0`` builds none; ``drop_pre_logits`` removes the representation layer.

    The description (a ``ViTConfig``, a ``ResNetConfig``) is returned changed, a copy;
    ``representation_size`` is the width of a pre-logits layer the file holds without a head
    (transformers' ``ViTModel`` pooler), which only a head can carry.
    """
    return _prepare(config, set(head_keys), set(pre_logits_keys), num_classes, drop_pre_logits,
                    image_size, dict(overrides or {}), representation_size)


# The head's own settings, given flat to load_checkpoint (``ViTConfig.from_keywords`` names).
_HEAD_SETTINGS = ("representation_size", "head_representation_size", "head_kernel_initializer",
                  "head_bias_init")


def _prepare(config, head_keys, pre_logits_keys, num_classes, drop_pre_logits, image_size,
                 overrides, headless_representation):
    head = config.head
    classes = None if head is None else head.num_classes
    representation = headless_representation if head is None else head.representation_size
    skip = set()
    if num_classes is not None and num_classes != classes:
        skip |= head_keys
        classes = num_classes or None
    head_settings = {k: overrides.pop(k) for k in _HEAD_SETTINGS if k in overrides}
    if representation is not None and (drop_pre_logits or num_classes == 0):
        skip |= pre_logits_keys
        representation = None
    if classes is None and representation is None:
        if head_settings:
            raise ValueError(f"{', '.join(sorted(head_settings))} describe a head, and this "
                             "model has none (num_classes=0, or a file without a head): give "
                             "num_classes=K for a head, or leave them out.")
        head = None
    else:  # a file's pre-logits layer without classes (the pooler) is a head of its own
        head = (head or Head(classes, representation_size=representation)).replace(
            num_classes=classes, representation_size=representation)
    config = config.replace(head=head)
    changes = dict(overrides, **({} if image_size is None else {"image_size": image_size}))
    return config.replace(**changes, **head_settings), skip


def resize_posemb_tensor(tensors, key, config, file_grid=None):
    """Resize the file's position embedding from its grid to the one ``config`` (a ``ViTConfig``)
    learns at (official fine-tuning).

    ``file_grid`` is the (rows, cols) the file states (a loader's ``posemb_grid``, a transformers
    config); without it the table must be square. A table stored in a narrower float (the
    package's float16 weights) is resized in float32, so that loading at a new size gives the
    table that resizing the loaded model's float32 table gives.
    """
    if key not in tensors:
        return tensors
    has_class_token = config.encoder.classifier == "token"
    table = np.asarray(tensors[key])
    if np.issubdtype(table.dtype, np.floating) and table.dtype.itemsize < 4:
        table = table.astype(np.float32)
    old_grid = table_grid(table.shape[1] - has_class_token, file_grid, "posemb_grid")
    new_grid = tuple(config.learned_grid)
    if old_grid == new_grid:
        return tensors
    tensors = dict(tensors)
    tensors[key] = resize_position_embedding(table, new_grid, has_class_token, old_grid)
    return tensors
