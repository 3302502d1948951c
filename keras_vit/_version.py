"""keras_vit's version, in a module of its own: the package root and the preset files' metadata
(``keras_vit.models.presets``) read it, and no package imports the root."""

__version__ = "0.1.0"
