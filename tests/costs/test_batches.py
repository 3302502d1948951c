"""``keras_vit.largest_batch`` and the paper's Fig. 12 from the memory count."""

from keras_vit.costs.batches import aligned_size, figure_12, largest_batch
from keras_vit.costs.memory import GIB, memory


def test_largest_batch_is_the_last_that_fits():
    batch = largest_batch("R50+ViT-B/16", 384, 16)
    assert memory("R50+ViT-B/16", 384, batch) <= 16 * GIB < memory("R50+ViT-B/16", 384, batch + 1)
    assert largest_batch("ViT-B/16", 384, 16, dtype="mixed_bfloat16") > largest_batch(
        "ViT-B/16", 384, 16)
    assert largest_batch("ViT-L/16", 384, 16, remat=True, dropout_rate=0.0) > largest_batch(
        "ViT-L/16", 384, 16)


def test_figure_12_reading():
    """The paper's Fig. 12 (right): the batch shrinks as the resolution grows, and ViT-B/32
    fits a larger batch than R50x1 at every size (at 384 px and more the attention matrices
    of the /16 and /14 models outgrow the ResNets' feature maps: docs/any-size-and-compute.md)."""
    table = figure_12(sizes=(224, 384, 512), training=False)
    for name, row in table.items():
        batches = [batch for _, batch in row]
        assert batches == sorted(batches, reverse=True) and batches[0] > 0, name
    assert all(v > r for (_, v), (_, r) in zip(table["ViT-B/32"], table["BiT-R50x1"]))
    assert [size for size, _ in table["ViT-H/14"]] == [224, 378, 518]


def test_aligned_size_is_the_nearest_multiple_of_the_stride():
    assert [aligned_size("ViT-H/14", size) for size in (224, 384, 512, 3)] == [224, 378, 518, 14]
    assert aligned_size("R50+ViT-B/16", 300) == 304  # a hybrid: 16 pixels per token
    assert aligned_size("BiT-R50x1", 200) == 192  # a ResNet: its 32-fold downsampling
    assert [size for size, _ in figure_12(["ViT-H/14"], [384], training=False)["ViT-H/14"]] == [378]
