"""Run code in a fresh interpreter where some packages cannot be imported, as where they are not
installed; shared by the tests of what works, and what says how to install, without them."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked}:
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
sys.meta_path.insert(0, Block())
"""


def run_without(blocked, code, env=None):
    """``subprocess.run`` of ``code`` (jax backend unless ``env`` says otherwise) with the
    packages ``blocked`` refused."""
    environ = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND="jax") if env is None else env
    script = BLOCK.format(blocked=set(blocked)) + code
    return subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True,
                          text=True, timeout=300)
