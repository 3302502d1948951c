# Runs first, for doctests and tests alike, with the repository as working folder. The suite is
# an application of the library: where the user chose no backend (no KERAS_BACKEND, no
# keras.json of their own) it takes the one `keras-vit` would, so that `python -m pytest` after
# the README's install (no TensorFlow) runs on jax instead of failing in `import keras`.
from keras_vit.app.backend_choice import choose_backend

choose_backend()
