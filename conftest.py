# Runs first, for doctests and tests alike, with the repository as working folder. The suite is
# an application of the library: where the user chose no backend (no KERAS_BACKEND, no
# keras.json of their own) it takes the one `keras-vit` would, so that `python -m pytest` after
# the README's install (no TensorFlow) runs on jax instead of failing in `import keras`.
import importlib.util

from keras_vit.app.backend_choice import choose_backend

choose_backend()

# keras_vit.data.tfdata is the tf.data path: where TensorFlow is not installed (Colab's TPU
# runtime) its import refuses with the install line, so its doctests are collected only where it is.
collect_ignore = [] if importlib.util.find_spec("tensorflow") else ["keras_vit/data/tfdata.py"]
