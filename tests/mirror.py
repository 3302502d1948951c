"""A local stand-in for the download servers (tests and CI; nothing here reaches the internet).

``build(root, ...)`` lays files out as ``KERAS_VIT_MIRROR`` expects them,
``<root>/<original host>/<original path>``: the four Fashion-MNIST files and, under published
checkpoint names, small official-format ``.npz`` files. ``serve(root)`` serves the folder over
HTTP on 127.0.0.1 from a thread. As a script it does both and serves until killed:

    python tests/mirror.py ROOT --fashion-mnist /usr/share/datasets/fashion-mnist \\
        --checkpoint imagenet21k/ViT-B_16=tests/fixtures/official/vit_tiny_token_norep.npz \\
        --port-file ROOT/port
"""

import argparse
import functools
import http.server
import os
import shutil
import threading


def location(root, url):
    """Where ``url`` lives in a mirror folder (``keras_vit.downloads.mirror_path``)."""
    from keras_vit.downloads import mirror_path

    return mirror_path(root, url)


def put(root, url, source):
    """Copy the file ``source`` into the mirror under ``url``; returns its mirror path."""
    target = location(root, url)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)
    return target


def checkpoint_url(name):
    """The download URL of a published checkpoint name, as ``load_checkpoint`` computes it."""
    from keras_vit.checkpoints import official

    bit = official._BIT_PUBLISHED.fullmatch(name)
    return (official.BIT_URL if bit else official.VIT_URL).format(name=name)


def build(root, *, fashion_mnist=None, checkpoints=()):
    """Fill a mirror folder: Fashion-MNIST from the folder ``fashion_mnist`` (its four files)
    and ``checkpoints``, pairs of (published name, local .npz)."""
    from keras_vit.data import offline

    if fashion_mnist is not None:
        for name in offline.FASHION_MNIST_SHA256:
            put(root, offline.FASHION_MNIST_ORIGIN + name, os.path.join(fashion_mnist, name))
    for name, path in checkpoints:
        put(root, checkpoint_url(name), path)
    return root


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(root, port=0):
    """Serve ``root`` on 127.0.0.1 from a daemon thread; returns ``(base_url, server)``."""
    handler = functools.partial(_Quiet, directory=os.fspath(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def main():
    parser = argparse.ArgumentParser(description="Serve a local download mirror.")
    parser.add_argument("root")
    parser.add_argument("--fashion-mnist", help="folder with the four Fashion-MNIST .gz files")
    parser.add_argument("--checkpoint", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", help="write the base URL here once serving")
    args = parser.parse_args()
    pairs = [item.split("=", 1) for item in args.checkpoint]
    build(args.root, fashion_mnist=args.fashion_mnist, checkpoints=pairs)
    url, server = serve(args.root, args.port)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(url)
        os.replace(args.port_file + ".tmp", args.port_file)
    print(url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
