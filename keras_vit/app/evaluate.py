"""``keras-vit evaluate`` (test accuracy) and ``keras-vit fewshot`` (few-shot linear accuracy of
frozen features): the commands that measure a saved model.
"""

from keras_vit import data
from keras_vit.app import configs, run_data, run_model, runs
from keras_vit.app.errors import UsageError
from keras_vit.checkpoints import convert
from keras_vit.evaluation import fewshot_linear
from keras_vit.models.resize import resize_model


def evaluate(config):
    """Test accuracy of a saved model on a dataset split, at the model's resolution.

    ``config``: an ``EvaluateConfig`` or a dict of its fields.
    """
    config = configs.EvaluateConfig.coerce(config)
    run = runs.begin(config)
    model = convert.load_model(config.checkpoint)
    if isinstance(model.output_shape, dict):
        raise UsageError(
            f"The model has no head (a backbone, whose outputs are {', '.join(model.output_shape)}"
            "); fine-tune it first (keras-vit finetune) or use `keras-vit fewshot`.")
    if model.output_shape[-1] != run.info.num_classes:
        raise UsageError(
            f"The model has {model.output_shape[-1]} outputs but {run.info.name} has "
            f"{run.info.num_classes} classes; fine-tune it first (keras-vit finetune) or use "
            "`keras-vit fewshot`.")
    run_model.compile_model(model)
    test_ds = run_data.evaluation_batches(run, model, config.batch_size, split=config.split)
    return run.finish(model, run_data.evaluate_model(model, test_ds))


def fewshot(config):
    """Few-shot linear accuracy of a model's frozen features (``keras_vit.evaluation``).

    ``config``: a ``FewshotConfig`` or a dict of its fields.
    """
    config = configs.FewshotConfig.coerce(config)
    run = runs.begin(config)
    model = convert.load_model(config.checkpoint)
    size = config.image_size or model.input_shape[1]
    arrays = []
    for split, limit in (("train", config.train_examples), ("test", config.test_examples)):
        ds = data.load(run.info.name, split, training=False, batch_size=config.batch_size,
                       image_size=size, data_dir=config.data_dir, max_examples=limit,
                       channels=run_model.channels(model))
        arrays.extend(data.as_arrays(ds))
    if size != model.input_shape[1]:
        model = resize_model(model, size)
    results = fewshot_linear(model, *arrays, shots=tuple(config.shots),
                             seeds=tuple(config.seeds), l2_reg=config.l2_reg,
                             batch_size=config.batch_size)
    return run.finish(model, {"fewshot": results})
