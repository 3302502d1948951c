"""Class names of the ImageNet (ILSVRC-2012) classifiers, for reading a fine-tuned head's output.

The official ImageNet heads (``imagenet21k+imagenet2012/...``, ``BiT-M-...-ILSVRC2012``) order
their 1,000 logits by WordNet synset id, the order of the dataset's label files. The package
ships that list (``imagenet2012_classes.tsv``: synset id, tab, its WordNet lemmas) so that a top-5
needs no download; it was written from the ImageNet lists that timm (Apache-2.0) carries.
"""

import functools
import os

_FILE = os.path.join(os.path.dirname(__file__), "imagenet2012_classes.tsv")


@functools.lru_cache(maxsize=1)
def _rows():
    with open(_FILE, encoding="utf-8") as file:
        return tuple(tuple(line.rstrip("\n").split("\t", 1)) for line in file if line.strip())


def imagenet2012_class_names(synsets=False):
    """The 1,000 ImageNet class names in the order of the official classifier heads.

    Each name is the synset's first WordNet lemma ("tench", "goldfish", ...). Two are shared by
    two classes each ("crane": the bird and the machine; "maillot": two kinds of swimsuit).

    Args:
        synsets: return the WordNet synset ids ("n01440764", ...) instead of the names.

    Returns:
        A list of 1,000 strings; entry i names logit i.

    Example:
    >>> names = imagenet2012_class_names()
    >>> len(names), names[0], names[281], imagenet2012_class_names(synsets=True)[0]
    (1000, 'tench', 'tabby', 'n01440764')
    """
    if synsets:
        return [synset for synset, _ in _rows()]
    return [lemmas.split(", ")[0] for _, lemmas in _rows()]
