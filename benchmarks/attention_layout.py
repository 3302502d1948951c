"""Layouts of the attention projections, timed in one process against keras-hub's ViTBackbone.

Usage (one backend per process):
    KERAS_BACKEND=jax python benchmarks/attention_layout.py --rounds 10
    KERAS_BACKEND=torch python benchmarks/attention_layout.py --model ViT-S/16

ViT-B/16 inference (224 px, batch 8; the backbones, no head) with the query/key/value/out
projections as

- ``separate``: four ``Dense`` layers, (D, D) kernels (keras_vit's layout);
- ``fused``: one ``Dense`` of width 3D for q, k and v, split after the product, and ``out``;
- ``raw``: raw (D, H, hd) / (H, hd, D) weights concatenated into one (D, 3D) kernel at every
  call (the layout before the projections became layers);

and keras-hub's ``ViTBackbone`` (``EinsumDense`` projections with (D, H, hd) kernels). The
models run round by round in a rotating order, so that the load of a shared machine falls on
all of them alike; each round times ``--iters`` calls of ``predict_on_batch`` per model, and the
speed of a layout is the median over rounds of keras-hub's time / its time (range in brackets).
"""

import argparse
import time

import keras
import numpy as np
from keras import ops

import keras_vit
from keras_vit.layers import attention, encoder
from keras_vit.models.registry import build_model


class FusedAttention(attention.MultiHeadSelfAttention):
    """q, k and v from one (D, 3D) Dense. Its ``build`` and ``_project`` are also what
    ``train_step.py``'s ``projections="fused"`` puts into every attention layer."""

    def build(self, input_shape):
        dim = input_shape[-1]
        self.hidden_size, self.head_dim = dim, dim // self.num_heads
        # The separate projections' fans (D, D), so that a model trained with this layout
        # starts from the same distribution as the model's own.
        for name, width in (("qkv", 3 * dim), ("out", dim)):
            layer = keras.layers.Dense(width, dtype=self.dtype_policy, name=name,
                                       kernel_initializer=attention.FlatGlorotUniform(dim, dim))
            setattr(self, name, layer)
            layer.build(input_shape)

    def _project(self, inputs, bias):
        qkv = ops.reshape(self.qkv(inputs), (ops.shape(inputs)[0], -1, 3, self.num_heads,
                                             self.head_dim))
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], bias

    def call(self, inputs, training=None, bias=None):
        q, k, v, _ = self._project(inputs, None)
        return self._output(ops.dot_product_attention(q, k, v, flash_attention=False))


class RawAttention(attention.MultiHeadSelfAttention):
    """Raw (D, H, hd) weights concatenated into one kernel every call: inference only."""

    def build(self, input_shape):
        dim = input_shape[-1]
        self.hidden_size, self.head_dim = dim, dim // self.num_heads
        heads = (self.num_heads, self.head_dim)
        self.kernels = [self.add_weight(shape=(dim, *heads), name=f"{n}_kernel")
                        for n in ("query", "key", "value")]
        self.biases = [self.add_weight(shape=heads, name=f"{n}_bias", initializer="zeros")
                       for n in ("query", "key", "value")]
        self.out_kernel = self.add_weight(shape=(*heads, dim), name="out_kernel")
        self.out_bias = self.add_weight(shape=(dim,), name="out_bias", initializer="zeros")

    def call(self, inputs, training=None, bias=None):
        dim = self.hidden_size
        kernel = ops.concatenate([ops.reshape(k, (dim, dim)) for k in self.kernels], axis=1)
        biases = ops.concatenate([ops.reshape(b, (dim,)) for b in self.biases])
        qkv = ops.matmul(inputs, kernel) + biases
        qkv = ops.reshape(qkv, (ops.shape(inputs)[0], -1, 3, self.num_heads, self.head_dim))
        context = ops.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2],
                                            flash_attention=False)
        context = ops.reshape(context, (ops.shape(inputs)[0], -1, dim))
        return ops.matmul(context, ops.reshape(self.out_kernel, (dim, dim))) + self.out_bias


def backbone(name, image_size):
    """The ``ViTBackbone`` of ``name`` (no head: keras-hub's ``ViTBackbone`` has none)."""
    return build_model(name, image_size=image_size, num_classes=None)


def with_attention(layer_class, name, image_size):
    """``backbone(name)`` whose blocks use ``layer_class`` for their attention."""
    original = encoder.MultiHeadSelfAttention
    encoder.MultiHeadSelfAttention = layer_class
    try:
        return backbone(name, image_size)
    finally:
        encoder.MultiHeadSelfAttention = original


def keras_hub_vit(config):
    """keras-hub's ``ViTBackbone`` of the shape of ``config`` (a ``ViTConfig``)."""
    import keras_hub

    encoder_config = config.encoder
    return keras_hub.models.ViTBackbone(
        image_shape=(*config.image_size, config.patches.num_channels),
        patch_size=config.patches.patch_size, num_layers=encoder_config.num_layers,
        num_heads=encoder_config.num_heads, hidden_dim=encoder_config.hidden_size,
        mlp_dim=encoder_config.mlp_dim, dropout_rate=0.0, attention_dropout=0.0,
        layer_norm_epsilon=encoder_config.layer_norm_epsilon,
        use_class_token=encoder_config.classifier == "token")


def time_rounds(models, images, rounds, iters):
    """``{name: [seconds of one call, per round]}``, the order rotating every round."""
    for model in models.values():  # compile and warm up
        model.predict_on_batch(images)
        model.predict_on_batch(images)
    names, seconds = list(models), {name: [] for name in models}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(iters):
                models[name].predict_on_batch(images)
            seconds[name].append((time.perf_counter() - start) / iters)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="ViT-B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--iters", type=int, default=2)
    args = parser.parse_args()
    models = {"separate": backbone(args.model, args.image_size),
              "fused": with_attention(FusedAttention, args.model, args.image_size),
              "raw": with_attention(RawAttention, args.model, args.image_size)}
    models["keras-hub"] = keras_hub_vit(models["separate"].config)
    images = np.random.default_rng(0).uniform(
        -1, 1, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    seconds = time_rounds(models, images, args.rounds, args.iters)
    hub = np.array(seconds["keras-hub"])
    print(f"backend={keras.backend.backend()} keras_vit={keras_vit.__version__} "
          f"model={args.model} batch={args.batch} rounds={args.rounds} iters={args.iters}")
    for name, values in seconds.items():
        ratio = hub / np.array(values)
        print(f"{name:>10}: {args.batch / np.median(values):6.2f} img/s (median), speed vs "
              f"keras-hub {np.median(ratio):.3f} [{ratio.min():.3f}-{ratio.max():.3f}]")


if __name__ == "__main__":
    main()
