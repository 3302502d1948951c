"""Pre-training compute of every model of the paper's Table 6 (the x-axis of Fig. 5).

Our estimate, ``keras_vit.costs.compute.pretraining_flops``: ``keras_vit.flops`` of one 224-px
image (forward) x 3 (forward and backward) x epochs x 303M JFT-300M images, beside the paper's
exaFLOPs (``keras_vit.costs.table_6.TABLE_6``). Counted from the registered names: nothing is
built, so this runs in a blink.

    python benchmarks/compute.py
"""

from keras_vit.costs.compute import flops, pretraining_flops
from keras_vit.costs.table_6 import TABLE_6


def rows():
    """(name, epochs, forward GFLOPs, our exaFLOPs, the paper's exaFLOPs) for Table 6."""
    for row in TABLE_6:
        forward = flops(row.model, 224, num_classes=18291)
        ours = pretraining_flops(row.model, row.epochs) / 1e18
        yield row.name, row.epochs, forward / 1e9, ours, row.exaflops


def main():
    print(f"{'model':16s} {'epochs':>6s} {'fwd GFLOPs':>11s} {'ours EFLOPs':>12s} "
          f"{'paper EFLOPs':>13s} {'ours/paper':>10s}")
    for paper, epochs, gflops, ours, exa in rows():
        print(f"{paper:16s} {epochs:6d} {gflops:11.1f} {ours:12.0f} {exa:13d} {ours / exa:10.2f}")


if __name__ == "__main__":
    main()
