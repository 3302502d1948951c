"""Pre-training compute of every model of the paper's Table 6 (the x-axis of Fig. 5).

Our estimate: ``keras_vit.flops`` of one 224-px image (forward) x 3 (forward and backward)
x epochs x 303M JFT-300M images, beside the paper's exaFLOPs. Counted by formula: no model
weights are needed, only the architectures (built without running them).

    python benchmarks/compute.py
"""

import keras_vit

JFT_IMAGES = 303e6
# (paper name, registry name, pre-training epochs, exaFLOPs in Table 6)
TABLE_6 = [
    ("ViT-B/32", "ViT-B/32", 7, 55),
    ("ViT-B/16", "ViT-B/16", 7, 224),
    ("ViT-L/32", "ViT-L/32", 7, 196),
    ("ViT-L/16", "ViT-L/16", 7, 783),
    ("ViT-L/16", "ViT-L/16", 14, 1567),
    ("ViT-H/14", "ViT-H/14", 14, 4262),
    ("ResNet50x1", "BiT-R50x1", 7, 50),
    ("ResNet50x2", "BiT-R50x2", 7, 199),
    ("ResNet101x1", "BiT-R101x1", 7, 96),
    ("ResNet152x1", "BiT-R152x1", 7, 141),
    ("ResNet152x2", "BiT-R152x2", 7, 563),
    ("ResNet152x2", "BiT-R152x2", 14, 1126),
    ("ResNet200x3", "BiT-R200x3", 14, 3306),
    ("R50x1+ViT-B/32", "R50+ViT-B/32", 7, 106),
    ("R50x1+ViT-B/16", "R50+ViT-B/16", 7, 274),
    ("R50x1+ViT-L/32", "R50+ViT-L/32", 7, 246),
    ("R50x1+ViT-L/16", "R50+ViT-L/16", 7, 859),
    ("R50x1+ViT-L/16", "R50+ViT-L/16", 14, 1668),
]


def rows(image_size=224, num_classes=18291):
    """(name, epochs, forward GFLOPs, our exaFLOPs, the paper's exaFLOPs) for Table 6."""
    forward = {}
    for paper, name, epochs, exa in TABLE_6:
        if name not in forward:
            model = keras_vit.create_model(name, image_size=image_size, num_classes=num_classes)
            forward[name] = int(keras_vit.flops(model))
        ours = 3 * forward[name] * epochs * JFT_IMAGES / 1e18
        yield paper, epochs, forward[name] / 1e9, ours, exa


def main():
    print(f"{'model':16s} {'epochs':>6s} {'fwd GFLOPs':>11s} {'ours EFLOPs':>12s} "
          f"{'paper EFLOPs':>13s} {'ours/paper':>10s}")
    for paper, epochs, gflops, ours, exa in rows():
        print(f"{paper:16s} {epochs:6d} {gflops:11.1f} {ours:12.0f} {exa:13d} {ours / exa:10.2f}")


if __name__ == "__main__":
    main()
