"""The AugReg checkpoints ("How to train your ViT?", Steiner et al. 2021) by model name.

The paper published about 50,000 files in ``gs://vit_models/augreg``: each model (Ti/16 ...
R50+L/32) pre-trained with several data sets, augmentations and regularisations, and each of
those fine-tuned on five data sets at two resolutions. ``index.csv`` in that folder describes
them, one row per fine-tuned file (``COLUMNS``). This module downloads the index like every
other file (``keras_vit.downloads``: the Keras cache, ``KERAS_VIT_MIRROR``) and answers:

- ``recommended(model)``: the checkpoint the official trainer picks when given a bare model
  name, the ImageNet-21k (``ds == "i21k"``) pre-training with the best upstream ``final_val``;
- ``query(model, **columns)``: the rows that match (``Row``, a named tuple of every column),
  with the published accuracies, best downstream validation accuracy first;
- ``checkpoint_name("augreg/ViT-B/16:cifar100@384")``: the published file a short name stands
  for, which ``keras_vit.load_checkpoint`` then loads.

Short names are ``augreg/<model>[:<downstream data set>[@<resolution>]]``. The model takes any
spelling of the index's names (``ViT-B/16``, ``B/16``, ``B_16``; ``R26+ViT-S/32``, ``R26+S/32``,
``R26_S_32``). Alone it names the recommended upstream file; with a data set it names the
fine-tuning of that file on the data set (at that resolution) with the best ``adapt_final_val``
(ties: the row listed first). Any other file is reached by its full name,
``"augreg/" + row.filename`` or ``"augreg/" + row.adapt_filename``.

Example (``index=`` reads a local copy; by default the index is downloaded; the package carries
an excerpt of the real index, the rows of a few models, for this example):
>>> import importlib.resources
>>> index = importlib.resources.files("keras_vit.checkpoints") / "augreg_index_excerpt.csv"
>>> recommended("ViT-B/16", index=index).filename
'B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0'
>>> best = query("B/16", adapt_ds="imagenet2012", recommended_only=True, index=index)[0]
>>> best.adapt_resolution, best.adapt_final_test
(384, 0.85486)
>>> checkpoint_name("augreg/ViT-B/16:imagenet2012@224", index=index)
'augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224'
"""

import collections
import csv
import functools
import math
import os
import re
import sys

INDEX_URL = "https://storage.googleapis.com/vit_models/augreg/index.csv"
PREFIX = "augreg/"
# The index's columns (vit_jax.checkpoint.get_augreg_df). Without "adapt_": the pre-training.
COLUMNS = (
    "name", "ds", "epochs", "lr", "aug", "wd", "do", "sd", "best_val", "final_val", "final_test",
    "adapt_ds", "adapt_lr", "adapt_steps", "adapt_resolution", "adapt_final_val",
    "adapt_final_test", "params", "infer_samples_per_sec", "filename", "adapt_filename",
)
UPSTREAM_COLUMNS = ("name", "ds", "epochs", "lr", "aug", "wd", "do", "sd", "best_val",
                    "final_val", "final_test", "filename")
# One row of the index (a fine-tuned file and the pre-training it started from); tuples keep
# the 51,509 rows of the real index small in memory.
Row = collections.namedtuple("Row", COLUMNS)
Upstream = collections.namedtuple("Upstream", UPSTREAM_COLUMNS)
_TEXT = {"name", "ds", "aug", "adapt_ds", "filename", "adapt_filename"}
_INTEGER = {"epochs", "adapt_steps", "adapt_resolution", "params"}
_SHORT = re.compile(r"(?P<model>[^:@]+)(?::(?P<adapt_ds>[^:@]+)(?:@(?P<resolution>[^:@]+))?)?")


# ----------------------------------------------------------------------------- the index


def read_index(index=None):
    """Every row of the AugReg index, as ``Row`` named tuples (text, int, float, or None where
    the index leaves a cell empty).

    Args:
        index: a local copy of ``index.csv``; None downloads it (once) into the Keras cache.
    """
    return list(_rows(index))


def _rows(index):
    path = os.fspath(index) if index is not None else _download()
    return _parse(path, *_stamp(path))


def _stamp(path):
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


def _download():
    from keras_vit.downloads import download

    # The check parses the fresh file: a cut-off or foreign file is deleted, a good one is
    # parsed once (the cache below is keyed by path, time and size).
    return download(INDEX_URL, cache_subdir=os.path.join("keras_vit", "augreg"),
                    check=lambda path: _parse(path, *_stamp(path)))


@functools.lru_cache(maxsize=4)
def _parse(path, mtime, size):
    """Parse and check the whole file (``mtime`` and ``size`` only key the cache)."""
    with open(path, "rb") as f:
        f.seek(max(size - 1, 0))
        if size and f.read(1) != b"\n":  # the index, as every CSV pandas writes, ends a line
            raise ValueError(f"{path!r} does not end with a line break; the file is cut short.")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        missing = [column for column in COLUMNS if column not in header]
        if missing:
            raise ValueError(
                f"{path!r} is not the AugReg index: the columns {', '.join(missing)} are "
                f"missing (it has {', '.join(header) or 'no header'}). Use a complete copy of "
                f"{INDEX_URL} (delete a stale one from the Keras cache, or check "
                "KERAS_VIT_MIRROR).")
        where = [(header.index(column), _CONVERT[column]) for column in COLUMNS]
        rows = tuple(_typed(path, reader.line_num, cells, len(header), where)
                     for cells in reader)
    if not rows:
        raise ValueError(f"{path!r} has the AugReg columns but no rows; the file is cut short.")
    return rows


def _typed(path, line, cells, width, where):
    if len(cells) != width:
        raise ValueError(f"{path!r} line {line} has {len(cells)} fields where the header has "
                         f"{width}; the file is cut short or damaged.")
    try:
        return Row._make([convert(cells[i]) for i, convert in where])
    except ValueError:
        for column, (i, convert) in zip(COLUMNS, where):  # find the cell, for the message
            try:
                convert(cells[i])
            except ValueError:
                raise ValueError(f"{path!r} line {line}: {column}={cells[i]!r} is not a "
                                 "number.") from None
        raise


def _text(text):
    return sys.intern(text.strip())  # each upstream file name repeats in ~68 rows


def _real(text):
    value = float(text) if text.strip() else math.nan
    return None if math.isnan(value) else value  # pandas writes a missing value as ""


def _whole(text):
    value = _real(text)
    return int(value) if value is not None and value.is_integer() else value


_CONVERT = dict.fromkeys(COLUMNS, _real) | dict.fromkeys(_TEXT, _text) | dict.fromkeys(
    _INTEGER, _whole)


# ----------------------------------------------------------------------------- questions


def model_key(model):
    """The index's file-name prefix of a model name in any spelling.

    >>> model_key("ViT-B/16"), model_key("R26+ViT-S/32"), model_key("R+Ti/16")
    ('B_16', 'R26_S_32', 'R_Ti_16')
    """
    return str(model).replace("ViT-", "").replace("+", "_").replace("/", "_")


def models(*, index=None):
    """The model names of the index (its ``name`` column), in the order they first appear."""
    return list(dict.fromkeys(row.name for row in _rows(index)))


def _of_model(model, rows):
    key = model_key(model)
    found = [row for row in rows if row.filename.split("-")[0] == key]
    if not found:
        names = ", ".join(dict.fromkeys(row.name for row in rows))
        raise ValueError(
            f"No AugReg model {model!r} in the index; it has {names}. Use one of those names "
            "(any spelling: 'ViT-B/16', 'B/16' or 'B_16'; hybrids 'R26+ViT-S/32' or 'R26+S/32').")
    return found


def recommended(model, *, index=None):
    """The recommended upstream checkpoint of ``model``, as the official trainer picks it.

    That is the ImageNet-21k pre-training (``ds == "i21k"``) with the highest ``final_val``
    (paper Sec. 4.5; ties: the row listed first). Returns an ``Upstream`` named tuple (the
    columns without ``adapt_``); ``"augreg/" + .filename`` loads it with
    ``keras_vit.load_checkpoint``.
    """
    rows = _select(_of_model(model, _rows(index)), {"ds": "i21k"}, f"model {model!r}")
    ranked = [row for row in rows if row.final_val is not None]
    if not ranked:
        raise ValueError(f"The index gives no final_val for the i21k checkpoints of {model!r}, "
                         "so none can be recommended; choose one with query().")
    best = max(ranked, key=lambda row: row.final_val)  # max keeps the first of equals
    return Upstream(*(getattr(best, column) for column in UPSTREAM_COLUMNS))


def query(model=None, *, recommended_only=False, index=None, **columns):
    """The index rows that match, best downstream validation accuracy first.

    Args:
        model: a model name in any spelling (``"ViT-B/16"``, ``"B/16"``, ``"R26+S/32"``); None
            for all models.
        recommended_only: keep only the fine-tunings of each model's ``recommended`` checkpoint.
        index: a local copy of ``index.csv``; None downloads it.
        **columns: column values to match, e.g. ``ds="i21k"`` (or ``"i1k"``, ``"i21k_30"``),
            ``aug="medium1"``, ``wd=0.1``, ``do=0.0``, ``sd=0.0``, ``adapt_ds="cifar100"``,
            ``adapt_resolution=384``, ``adapt_steps=500``, ``adapt_lr=0.01``.

    Returns:
        A list of ``Row`` named tuples, one per fine-tuned file, with every column (the
        published accuracies: ``final_val``/``final_test`` upstream,
        ``adapt_final_val``/``adapt_final_test`` downstream), sorted by ``adapt_final_val``
        (highest first, empty last, equals in index order). ``pandas.DataFrame(rows)`` makes a
        table of them.

    Raises:
        ValueError: no row matches; the message names the values the index has.
    """
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        raise ValueError(f"The AugReg index has no column {', '.join(unknown)}; filter on "
                         f"{', '.join(COLUMNS)}.")
    rows = _rows(index)
    what = "the index"
    if model is not None:
        rows, what = _of_model(model, rows), f"model {model!r}"
    if recommended_only:
        best = {recommended(name, index=index).filename for name in {row.name for row in rows}}
        rows = [row for row in rows if row.filename in best]
        what += " (recommended checkpoints)"
    rows = _select(rows, columns, what)
    return sorted(rows, key=lambda row: -math.inf if row.adapt_final_val is None
                  else row.adapt_final_val, reverse=True)  # reverse keeps equals in order


def _select(rows, columns, what):
    """Filter on each column in turn; an empty result names the values that were there."""
    for column, wanted in columns.items():
        kept = [row for row in rows if _equal(getattr(row, column), wanted)]
        if not kept:
            present = sorted({getattr(row, column) for row in rows}, key=str)
            raise ValueError(
                f"No AugReg checkpoint of {what} has {column}={wanted!r}; the index has "
                f"{column} in {present}. Choose one of those values.")
        rows, what = kept, f"{what} with {column}={wanted!r}"
    return rows


def _equal(value, wanted):
    if isinstance(value, (int, float)) and not isinstance(wanted, str):
        return value == wanted
    return str(value) == str(wanted)


# ----------------------------------------------------------------------------- short names


def is_short_name(name):
    """Whether ``name`` is an ``augreg/<model>...`` short name rather than a published file
    name (which always has a ``-`` after the model, as in ``B_16-i21k-...``)."""
    name = str(name)
    if not name.startswith(PREFIX):
        return False
    return "-" not in name[len(PREFIX):].split(":")[0].replace("ViT-", "")


def checkpoint_name(name, *, index=None):
    """The published name (``augreg/<file>``, no ``.npz``) a short name stands for.

    ``augreg/<model>`` is the recommended upstream checkpoint; ``augreg/<model>:<data set>``
    its fine-tuning on that data set with the best ``adapt_final_val``, at ``@<resolution>``
    if given.
    """
    match = _SHORT.fullmatch(str(name)[len(PREFIX):]) if is_short_name(name) else None
    if match is None:
        raise ValueError(
            f"{name!r} is not an AugReg short name. Write 'augreg/<model>' (the recommended "
            "checkpoint, e.g. 'augreg/ViT-B/16'), 'augreg/<model>:<data set>' or "
            "'augreg/<model>:<data set>@<resolution>' (e.g. 'augreg/ViT-B/16:cifar100@384').")
    upstream = recommended(match["model"], index=index)
    if match["adapt_ds"] is None:
        return PREFIX + upstream.filename
    wanted = {"filename": upstream.filename, "adapt_ds": match["adapt_ds"]}
    if match["resolution"] is not None:
        if not match["resolution"].isdigit():
            raise ValueError(f"The resolution in {name!r} must be a whole number of pixels, as "
                             "in 'augreg/ViT-B/16:cifar100@384'.")
        wanted["adapt_resolution"] = int(match["resolution"])
    return PREFIX + query(match["model"], index=index, **wanted)[0].adapt_filename
