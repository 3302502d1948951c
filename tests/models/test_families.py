"""Every family against every table that the packages above key by family: each entry is filled,
or the family refuses with a message. A new family missing from a table fails here, not at run
time as a KeyError."""

import dataclasses

import pytest

from keras_vit.checkpoints import capabilities, official, timm
from keras_vit.checkpoints.formats import FORMATS
from keras_vit.costs import compute, memory, parameters
from keras_vit.models import family as family_module
from keras_vit.models.registry import FAMILIES

pytestmark = pytest.mark.backend_independent  # tables and records, nothing built

# The tables with an entry for every family.
FAMILY_TABLES = {"costs.parameters.COUNTS": parameters.COUNTS,
                 "costs.compute.COUNTS": compute.COUNTS, "costs.memory.TALLIES": memory.TALLIES}
# The tables with an entry for every family whose weights have a checkpoint layout.
LAYOUT_TABLES = {"checkpoints.official.TABLES": official.TABLES,
                 "checkpoints.timm.TABLES": timm.TABLES}
# The tables with an entry for every kind of ResNet a family's stem may be.
RESNET_TABLES = {"costs.parameters.UNITS": parameters.UNITS,
                 "costs.compute.MIDDLES": compute.MIDDLES, "costs.memory.UNITS": memory.UNITS}


@dataclasses.dataclass
class _Model:
    """What the checkpoint check reads of a model before its layers: its description."""

    config: object


@pytest.fixture(params=FAMILIES, ids=lambda family: family.name)
def family(request):
    return request.param


def test_a_family_parses_its_names_into_its_own_classes(family):
    assert family.backbone.config_class is family.description
    assert family.classifier.backbone_cls is family.backbone
    for name in family.published:
        config = family.parse(name)
        assert type(config) is family.description and config.family is family
        assert family.model_class(config) is family.classifier
        assert family.model_class(config.backbone()) is family.backbone


def test_every_cost_counts_every_family(family):
    missing = [name for name, table in FAMILY_TABLES.items() if family not in table]
    assert not missing, f"the {family.name} family has no entry in {missing}"


def test_every_resnet_kind_is_counted(family):
    if family.stem == "patches":  # no ResNet: patches of the image
        return
    missing = [name for name, table in RESNET_TABLES.items() if family.stem not in table]
    assert not missing, f"the {family.name} family's {family.stem!r} ResNet is not in {missing}"


def test_every_format_writes_a_family_or_refuses_it(family):
    config = family.parse(family.published[0])
    if not family.weights:
        for found in FORMATS:
            with pytest.raises(ValueError, match=f"{family.name} has no {found.holds.name} layout"):
                capabilities.check_expressible(_Model(config), found.holds)
        return
    missing = [name for name, table in LAYOUT_TABLES.items() if family not in table]
    assert not missing, f"the {family.name} family has no entry in {missing}"
    assert family.stem in capabilities.CHECKS, f"no check of a {family.stem!r} stem"
    for found in FORMATS:
        assert family.stem in found.holds.stems or family.stem in capabilities.STEM_ERRORS, \
            found.name


@pytest.mark.parametrize("need", sorted(family_module.NEEDS))
def test_a_refusal_is_a_message(family, need):
    reason = getattr(family, need)
    if reason is None:
        family.check(need, "f", "fix")  # supported: no error
        return
    assert reason.strip(), f"the {family.name} family refuses {need} without saying why"
    with pytest.raises(family_module.Refused, match=f"f needs {family_module.NEEDS[need]}"):
        family.check(need, "f", "fix")


def test_a_stem_outside_the_kinds_is_refused():
    with pytest.raises(ValueError, match="not a kind of stem"):
        dataclasses.replace(FAMILIES[0], stem="convolution")
