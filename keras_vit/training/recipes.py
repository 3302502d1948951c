"""The paper's training recipes as Keras optimizers, losses and model surgery.

Pre-training (paper Sec. 4.1, Appendix B.1, Table 3): Adam (beta1 0.9, beta2 0.999), decoupled
weight decay (0.1 in Sec. 4.1; Table 3 sets it per dataset: 0.1 on JFT-300M, 0.03 on
ImageNet-21k, 0.3 on ImageNet), linear warmup then linear (or cosine) decay, dropout set per
dataset too (Table 3: 0.0 on JFT-300M, 0.1 on ImageNet-21k and ImageNet), optionally a constant
head bias (the i21k runs used -10 with a sigmoid loss). Table 3 clips the global gradient norm at
1 for ImageNet only ("For ImageNet we found it beneficial to additionally apply gradient
clipping"); ``pretraining_optimizer`` clips by default, as the small datasets this package
trains on are closer to ImageNet than to JFT-300M. Label smoothing is one of the three
regularisers tuned for the smaller datasets (Sec. 4.3), with no value given.

Weight decay conversion. The paper's "weight decay 0.1" is flax's ``optim.Adam(weight_decay=)``
convention: every step does ``p -= lr_t * wd * p`` with the *scheduled* learning rate ``lr_t``.
``keras.optimizers.AdamW`` applies exactly ``p -= lr_t * wd * p`` too, so the paper's 0.1 is
``AdamW(weight_decay=0.1)``. big_vision writes decay that is multiplied by the schedule's
multiplier only, not by the base learning rate: its ``wd=1e-4`` at ``lr=1e-3`` is
``weight_decay = 1e-4 / 1e-3 = 0.1`` here. (PyTorch's ``AdamW`` uses the Keras convention.)
Decay applies to every variable, as in flax's Adam; call
``optimizer.exclude_from_weight_decay(var_names=[...])`` before training to spare some.

Fine-tuning (Appendix B.1.1, Table 4): the official step of vit_jax, ``finetuning_optimizer``:
SGD with optax's momentum trace (stored in bfloat16), no weight decay, global-norm clipping at 1
of the gradient averaged over the micro-batches, cosine decay with linear warmup on the update
count, the head replaced by a zero-initialised Dense, often at a higher resolution
(``keras_vit.resize_model``); optional Polyak averaging (Keras' ``use_ema``). See
``keras_vit.training.optimizers`` for how the trace differs from Keras' ``SGD``.
"""

import keras

from keras_vit.checks import positive_int
from keras_vit.models.habits import FINE_TUNING  # the paper's constants, written once
from keras_vit.training.optimizers import AdjustableAdamW
from keras_vit.training.schedules import AdjustableWarmupDecay, warmup_schedule


def pretraining_optimizer(total_steps, *, learning_rate=1e-3, warmup_steps=10_000, decay="linear",
                          end_learning_rate=1e-5, weight_decay=0.1, global_clipnorm=1.0,
                          beta_1=0.9, beta_2=0.999, epsilon=1e-8, adjustable=False):
    """AdamW with the paper's pre-training settings and the official warmup/decay schedule.

    Args:
        total_steps: optimizer steps of the whole run.
        learning_rate: peak learning rate (Table 3: 1e-3 for i21k, 3e-3 / 8e-4 for others).
        warmup_steps: linear warmup steps (10k in the paper).
        decay: ``"linear"`` (the paper, down to ``end_learning_rate``) or ``"cosine"``.
        weight_decay: decay in the paper's convention (see the module docstring).
        global_clipnorm: clip the global gradient norm (1: Table 3's ImageNet runs; None
            disables, as the paper's JFT-300M and ImageNet-21k runs).
        adjustable: the same schedule, whose end can move while training
            (``AdjustableWarmupDecay`` in an ``AdjustableAdamW``: a run re-planned to a time
            budget).

    Example:
    >>> optimizer = pretraining_optimizer(1000, warmup_steps=100)
    >>> optimizer.beta_1, optimizer.beta_2, optimizer.weight_decay, optimizer.global_clipnorm
    (0.9, 0.999, 0.1, 1.0)
    """
    if adjustable:
        schedule = AdjustableWarmupDecay(learning_rate, total_steps, warmup_steps, decay,
                                         end_learning_rate)
    else:
        schedule = warmup_schedule(learning_rate, total_steps, warmup_steps, decay,
                                   end_learning_rate)
    return (AdjustableAdamW if adjustable else keras.optimizers.AdamW)(
        learning_rate=schedule,
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        global_clipnorm=global_clipnorm,
    )


MOMENTUM_FORMS = ("trace", "keras")


def finetuning_optimizer(total_steps, *, learning_rate=FINE_TUNING["learning_rate"],
                         warmup_steps=FINE_TUNING["warmup_steps"], decay="cosine",
                         gradient_accumulation_steps=1, momentum=FINE_TUNING["momentum"],
                         momentum_dtype="bfloat16", momentum_form="trace",
                         global_clipnorm=FINE_TUNING["global_clipnorm"], use_ema=False,
                         ema_momentum=0.9999):
    """The official fine-tuning optimizer: SGD with a momentum trace, clipping of the
    accumulated gradient, and warmup + decay on the update count.

    Fed to ``model.fit`` with micro-batches of ``global_batch // gradient_accumulation_steps``
    (``shuffle=False``), it makes the updates of vit_jax's ``make_update_fn`` with the optimizer
    of its ``train_and_evaluate`` (docs/training.md states to what precision).

    Args:
        total_steps: updates of the fine-tuning run (e.g. 10k for CIFAR, 500 AugReg).
        learning_rate: base learning rate (Table 4 sweeps {0.001, 0.003, 0.01, 0.03}).
        warmup_steps: linear warmup updates (500 official); must be below ``total_steps``.
        decay: ``"cosine"`` or ``"linear"`` (to 1e-5), as ``warmup_schedule``.
        gradient_accumulation_steps: micro-batches averaged into one update (the official
            ``accum_steps``; the published fine-tunes use 8 for a global batch of 512).
        momentum_dtype: ``"bfloat16"`` (the official trainer's trace) or ``"float32"``.
        momentum_form: ``"trace"`` (the official optax update, ``TraceSGD``) or ``"keras"``
            (Keras' ``SGD``, ``v = 0.9 v - lr g``: the same for a constant rate only, and its
            velocity is stored in float32).
        use_ema: Polyak averaging of the weights (``ema_momentum``); the averages are written
            into the model at the end of ``fit``. Not part of the official step.

    Example:
    >>> optimizer = finetuning_optimizer(500, warmup_steps=100, gradient_accumulation_steps=8)
    >>> type(optimizer).__name__, optimizer.momentum, optimizer.momentum_dtype
    ('TraceSGD', 0.9, 'bfloat16')
    >>> optimizer.global_clipnorm, optimizer.gradient_accumulation_steps
    (1.0, 8)
    """
    from keras_vit.training.optimizers import AccumulatingSGD, TraceSGD

    accumulation = positive_int("gradient_accumulation_steps", gradient_accumulation_steps)
    options = dict(
        learning_rate=warmup_schedule(learning_rate, total_steps, warmup_steps, decay),
        momentum=momentum, global_clipnorm=global_clipnorm, use_ema=use_ema,
        ema_momentum=ema_momentum,
        gradient_accumulation_steps=accumulation if accumulation > 1 else None)
    if momentum_form == "trace":
        return TraceSGD(momentum_dtype=momentum_dtype, **options)
    if momentum_form == "keras":
        return AccumulatingSGD(**options)
    raise ValueError(f"Unknown momentum_form {momentum_form!r}; use one of {MOMENTUM_FORMS}.")


def classification_loss(label_smoothing=0.0):
    """Softmax cross-entropy on logits with one-hot (or mixed) labels and label smoothing.

    Example:
    >>> classification_loss(0.1).label_smoothing
    0.1
    """
    return keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=label_smoothing)


def prepare_finetuning(model, num_classes, *, image_size=None, keep_pre_logits=False,
                       lora_rank=None, lora_targets="qv"):
    """The pre-trained model ready for fine-tuning (paper Sec. 3.2; official ``load_pretrained``).

    A ViT's new task is the same backbone with a new zero-initialised head of ``num_classes``
    (``ViTImageClassifier(backbone, num_classes=...)``): the backbone is shared with ``model``,
    not copied, so training the result trains ``model``'s backbone too (load the file again
    for an untouched copy). The ``pre_logits`` layer is dropped unless ``keep_pre_logits``
    (then its weights are carried over). With ``image_size`` the backbone first moves to that
    resolution (position embeddings interpolated, ``resize_model``: a new backbone). A BiT
    ResNet or AxialResNet gets its new head the same way. With ``lora_rank`` only the head and
    rank-``lora_rank`` LoRA factors of the attention projections (``lora_targets``: ``"qv"`` or
    ``"all"``) train (``keras_vit.models.lora``; ``merge_lora`` afterwards gives a plain
    model).

    Args:
        model: a keras_vit backbone or classifier of any family, pre-trained.
        num_classes: classes of the new task.

    Example:
    >>> import keras_vit, numpy as np
    >>> model = keras_vit.ViTImageClassifier(image_size=28, patch_size=7, hidden_size=16,
    ...     num_layers=1, num_heads=2, mlp_dim=32, num_classes=10, num_channels=1,
    ...     representation_size=8)
    >>> tuned = prepare_finetuning(model, 5)
    >>> tuned.config.head.num_classes, tuned.config.head.representation_size
    (5, None)
    >>> tuned.backbone is model.backbone  # the same backbone, a new head
    True
    >>> prepare_finetuning(model, 5, image_size=56).config.image_size
    (56, 56)
    >>> lora = prepare_finetuning(model, 5, lora_rank=2)  # query and value factors, the head
    >>> sum(int(np.prod(v.shape)) for v in lora.trainable_weights)  # (16x2 + 2x16) x 2 + 16x5 + 5
    213
    """
    from keras_vit.models.resize import resize_model

    if image_size is not None and tuple(_image_size(model) or ()) != _pair(image_size):
        model = resize_model(model, image_size)
    model = _new_head(model, int(num_classes), keep_pre_logits)
    if lora_rank is not None:
        from keras_vit.models.lora import enable_lora

        enable_lora(model, lora_rank, lora_targets)
    return model


def _pair(size):
    return tuple(size) if isinstance(size, (tuple, list)) else (size, size)


def _image_size(model):
    return model.config.image_size


def _new_head(model, num_classes, keep_pre_logits):
    """A zero-initialised head of ``num_classes`` on ``model``'s backbone (any family)."""
    from keras_vit.models.registry import model_class

    backbone = getattr(model, "backbone", model)
    classifier = model_class(backbone.config.replace(num_classes=num_classes))
    head = model.config.head
    representation = head.representation_size if head is not None and keep_pre_logits else None
    policy = model.dtype_policy
    dtype = getattr(policy, "default_policy", policy)  # a quantized model's map: its default
    new = classifier(backbone, num_classes=num_classes, dtype=dtype,
                     representation_size=representation,
                     name=model.name if backbone is not model else None)
    if representation is not None:
        new.get_layer("pre_logits").set_weights(model.get_layer("pre_logits").get_weights())
    return new
