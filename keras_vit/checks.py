"""The argument checks every layer shares, each written once with its message.

A model's settings are checked where they are made (a description's ``__post_init__``, a
layer's constructor), a recipe's or a count's arguments where they are taken; all of them say
the same thing the same way through these functions. The module imports no package of keras_vit
(it serves the lowest layer of the architecture and every one above, as ``downloads`` and
``distribution`` do) and no Keras.

Example:
>>> positive_int("num_layers", 12.0), pair("image_size", 224)
(12, (224, 224))
>>> try:
...     check_multiple((32, 30), 8)
... except ValueError as error:
...     print(str(error).replace(". Use", ".\\nUse"))
The image width (30) is not a multiple of the stride (8).
Use a size that divides by 8, e.g. 24 or 32.
"""

import json
import numbers


def positive_int(name, value, *, optional=False):
    """``value`` as an int when it is a positive whole number (None passes when ``optional``);
    else a ``ValueError`` naming ``name``."""
    if value is None and optional:
        return None
    whole = isinstance(value, numbers.Real) and not isinstance(value, bool) and (
        int(value) == value)
    if not whole or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def pair(name, value, *, optional=False, sides=("height", "width")):
    """``(first, second)`` of an int or a pair of positive ints (None passes when ``optional``),
    e.g. an image's (height, width) or a grid's (rows, cols), as ``sides`` names them."""
    if value is None and optional:
        return None
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(values) != 2:
        raise ValueError(f"{name} must be an int or a ({', '.join(sides)}) pair, got {value!r}.")
    return positive_int(name, values[0]), positive_int(name, values[1])


def check_multiple(sides, stride, *, what="image", unit="stride"):
    """Refuse a (height, width) whose sides ``stride`` does not divide (a None side, any size
    at call time, passes). ``what`` names the input, ``unit`` what the stride is (the patch
    size, the model's stride...); the error suggests the nearest sizes that divide."""
    for side_name, side in zip(("height", "width"), sides):
        if side is not None and side % stride:
            lower = max(stride, side // stride * stride)
            raise ValueError(
                f"The {what} {side_name} ({side}) is not a multiple of the {unit} ({stride}). "
                f"Use a size that divides by {stride}, e.g. {lower} or {lower + stride}.")


def read_json(path, fix, text=None):
    """The JSON the file ``path`` holds (or ``text``, when the caller read it from an archive): a
    file any part of keras_vit reads is named, with what is wrong and ``fix`` (what to do), when
    it cannot be read or parsed (a ``ValueError``).

    Example:
    >>> read_json("run/history.json", "delete it to start the history again", text="[1, 2]")
    [1, 2]
    >>> try:
    ...     read_json("run/history.json", "delete it to start the history again", text="[1,")
    ... except ValueError as error:
    ...     print(error)  # doctest: +ELLIPSIS
    run/history.json is not valid JSON (Expecting value: ...); delete it to start the history again.
    """
    try:
        if text is not None:
            return json.loads(text)
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except json.JSONDecodeError as error:
        problem = f"is not valid JSON ({error})"
    except UnicodeDecodeError as error:
        problem = f"is not text ({error.reason} at byte {error.start})"
    except OSError as error:
        problem = f"cannot be read ({error.strerror or error})"
    raise ValueError(f"{path} {problem}; {fix}.")
