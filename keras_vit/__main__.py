"""``python -m keras_vit`` runs the ``keras-vit`` command line."""

import sys

from keras_vit.app import main

if __name__ == "__main__":
    sys.exit(main())
