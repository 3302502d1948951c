"""Execute every teaching notebook top to bottom in small mode (KERAS_VIT_SMALL=1).

Run as `python -m pytest notebooks` under a chosen KERAS_BACKEND in a clone, and in CI by .ci/colab
from a copy outside the checkout (a fresh virtualenv with the wheel, a download mirror; one device
as on Colab's TPU v5e-1, then a subset with 8 devices and Kaggle's variables).
The committed notebooks keep the outputs of a full run. Each notebook runs alone in a fresh
working folder, and checks the proofs it shows with asserts a reader sees.
"""

import ast
import glob
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = sorted(glob.glob(os.path.join(HERE, "[0-9][0-9]_*.ipynb")))


def test_all_six_notebooks_exist():
    assert len(NOTEBOOKS) >= 6, NOTEBOOKS
    assert any(os.path.basename(path).endswith("_encoder.ipynb") for path in NOTEBOOKS), NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_outside_a_checkout(path):
    """Nothing reads the repository around the notebook; the install cell takes the published
    name or $KERAS_VIT_INSTALL."""
    code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    text = "\n".join(code)
    assert "../" not in text and '"..",' not in text and "'..'," not in text
    setup = [c for c in code if c.startswith("# Set-up")]
    assert len(setup) == 1 and setup[0] == code[0], "one set-up cell, the first code cell"
    assert "KERAS_VIT_INSTALL" in setup[0] and '"keras-vit-paper[notebooks]"' in setup[0]
    assert "keras_vit.app.runtime.setup(" in setup[0]  # seeds, small mode, every device


def test_titles_and_cross_references_use_the_file_numbers():
    """A renumbering must reach the titles and every "notebook NN" in the text."""
    numbers = {os.path.basename(path)[:2] for path in NOTEBOOKS}
    for path in NOTEBOOKS:
        cells = nbformat.read(path, as_version=4).cells
        assert cells[0].source.startswith(f"# {os.path.basename(path)[:2]} · "), path
        text = "\n".join(c.source for c in cells)
        for number in re.findall(r"[Nn]otebooks? (\d\d)", text):
            assert number in numbers, (path, number)


def test_committed_outputs_carry_no_log_noise_or_warnings():
    """What a reader sees: no TensorFlow/absl start-up lines, no library warnings."""
    noise = re.compile(r"I0000 |absl::InitializeLog|Warning:|WARNING")
    for path in NOTEBOOKS:
        for cell in _code_cells(path):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream":
                    assert not noise.search(output["text"]), (path, output["text"][:300])


# notebook -> the asserts (their condition's start) that check a proof the notebook shows
PROOFS = {
    "01_patchify.ipynb": [
        "np.allclose(tokens_conv, tokens_linear",  # the P x P conv is the projection E
    ],
    "02_encoder.ipynb": [
        "block_error < ",  # Eq. 2-3 (heads as Eq. 5-8) by hand give EncoderBlock's output
        "encoder_error < ",  # L blocks and the final LayerNorm (Eq. 4) give the features
        "post_stream_error < ",  # post-LN: unit RMS after every block
        "np.all(np.diff(stream['pre-LN'][::2]",  # pre-LN: the residual stream grows with depth
        "counted == formula",  # the per-block parameter formula counts an EncoderBlock
        "counts[name] == formula",  # and whole models' count_params()
        "int(b16) == 86 and int(h14) == 632",  # Table 1 for B and H
        "int(millions['L/16, 224 px, 1000 classes']) == 304",  # L/16 is 304M, not 307M
        "head_error < ",  # pre-training head: tanh(y W + b) V + c
        "'pre_logits' not in names",  # fine-tuning head: no pre-logits, zero logits
        "one_by_one_error < ",  # the hybrid's 1x1 patch embedding is a matrix product
        "np.count_nonzero(plain_change) == 1",  # patch tokens see their patch, hybrid more
    ],
    "03_class_token_and_position_embeddings.ipynb": [
        "change['none'] < ",  # no position embedding: invariant to shuffled patches
        "abs(results['token + none'][0] - results['token + none'][1])",  # also when trained
    ],
    "05_high_res_finetuning.ipynb": [
        "np.abs(kernel).max() == 0 and np.abs(logits).max() == 0",  # zero head, zero logits
        "abs(loss - np.log(NUM_CLASSES))",  # so the first loss is ln K
        "np.allclose(by_hand, after",  # load_checkpoint interpolates like the function
        "np.allclose(kept, before",  # the same grid is the identity
        "linear",  # rows stay rows, corners stay corners (an independent check)
    ],
    "06_inspection.ipynb": [
        "abs(ratio[-1] - 1) < ",  # 16 components hold all the variance of 16-value filters
        "np.allclose(matrix[0, 1:]",  # a class-token map is row 0 of the attention matrix
        "np.allclose(matrix.sum(axis=-1), 1",  # every row of the matrix is a distribution
    ],
    "08_compute_and_memory.ipynb": [
        # Fig. 12 (right), from the memory model
        "all((np.all(np.diff(row) < 0)",  # every model's batch falls with the size
        "np.all(vit_b32 > r50)",  # ViT-B/32 fits more than BiT-R50x1 at every size
        "vit_l16[0] > r152[0]",  # ViT-L/16 fits more than BiT-R152x2 at 224 px
        "np.all(vit_b16[2:] < r50[2:])",  # where the count departs from the paper
    ],
    "07_axial_attention.ipynb": [
        "np.array_equal(row_changed, in_row)",  # a row attention moves only its own row
        "np.all(two_steps)",  # a row then a column attention reach every token
    ],
}


# A number the text quotes as measured is written in bold, `**0.834**` (units outside the stars).
MEASURED = re.compile(r"\*\*([-−]?\d[\d,]*(?:\.\d+)?)\*\*")


def unshown_measured_numbers(notebook):
    """The bold numbers of the markdown cells that no output of the notebook prints (thousands
    separators ignored, and a number must stand alone: 0.83 is not found in 0.834)."""
    printed = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            printed.append(output.get("text", ""))
            printed.append(output.get("data", {}).get("text/plain", ""))
            printed.append(output.get("data", {}).get("text/html", ""))
    printed = "\n".join(printed).replace(",", "").replace("−", "-")
    missing = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        for number in MEASURED.findall(cell.source):
            plain = number.replace(",", "").replace("−", "-")
            if not re.search(r"(?<![\d.])" + re.escape(plain) + r"(?![\d]|\.\d)", printed):
                missing.append(number)
    return missing


def test_the_measured_number_check_finds_a_number_the_outputs_lack():
    cell = nbformat.v4.new_code_cell("print(0.834)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="accuracy 0.834, 1,797 images\n")]
    for text, missing in (("It reaches **0.834** on **1,797** images.", []),
                          ("It reaches **0.83**.", ["0.83"]), ("It reaches **0.8341**.", ["0.8341"])):
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text), cell])
        assert unshown_measured_numbers(notebook) == missing, text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_measured_numbers_in_the_text_are_in_the_outputs(path):
    """Text and committed outputs cannot drift apart: every bold number is printed by a cell
    (and each notebook's text reads some measured number, so the check has something to check)."""
    notebook = nbformat.read(path, as_version=4)
    assert any(MEASURED.search(c.source) for c in notebook.cells if c.cell_type == "markdown")
    missing = unshown_measured_numbers(notebook)
    assert not missing, f"{os.path.basename(path)}: the text quotes {missing}; no output shows them"


def _code_cells(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _without_magics(source):
    """The cell as plain Python: IPython's %magic and !shell lines become `pass`."""
    return re.sub(r"^(\s*)[%!].*$", r"\1pass", source, flags=re.MULTILINE)


@pytest.mark.parametrize("name", sorted(PROOFS))
def test_proofs_are_checked_by_visible_asserts(name):
    """Each proof is an `assert condition, "message"` in the cell that prints its number, and
    that cell keeps its committed output, so the reader sees both."""
    for condition in PROOFS[name]:
        found = [(cell, node) for cell in _code_cells(os.path.join(HERE, name))
                 for node in ast.walk(ast.parse(_without_magics(cell.source)))
                 if isinstance(node, ast.Assert)
                 and ast.unparse(node.test).startswith(condition)]
        assert len(found) == 1, f"{name}: no single assert for {condition!r}"
        cell, node = found[0]
        assert node.msg is not None, f"{name}: the assert on {condition!r} needs a message"
        assert "print(" in cell.source and cell.outputs, f"{name}: {condition!r} not shown"


def test_no_notebook_reads_another_notebooks_files():
    """Order independence: file names a notebook's code uses (runs/NN_...) carry its own
    number; another notebook's file may only be named in a comment, as an option."""
    for path in NOTEBOOKS:
        number = os.path.basename(path)[:2]
        code = "\n".join(re.sub(r"(^|\s)#.*", "", line) for cell in _code_cells(path)
                         for line in cell.source.splitlines())
        others = set(re.findall(r"[\"'/](\d\d)_", code)) - {number}
        assert not others, f"{os.path.basename(path)} uses files of notebook(s) {others}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_in_small_mode(path, monkeypatch, tmp_path):
    """Alone, in a fresh working folder: nothing another notebook wrote is there, and nothing
    is written into the checkout."""
    monkeypatch.setenv("KERAS_VIT_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    repo = os.path.dirname(HERE)
    monkeypatch.setenv("PYTHONPATH", repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
