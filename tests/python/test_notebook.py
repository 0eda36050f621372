# SPDX-License-Identifier: MIT
"""%load_ext torchwrapper in a real notebook, run headless by nbclient on an ipykernel kernel: the
cell magic's output holds the cell's APIs with exact call counts (text and tw-report's HTML page),
a raising cell still shows what it recorded and leaves torch restored, a second cell is profiled
again, the line magic profiles one statement, and bad options are named."""
import html
import os
import re
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


@pytest.fixture(autouse=True)
def kernel_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))   # the kernel imports the torchwrapper under test


def run_notebook(cells, tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    # A cell's outputs come on IOPub until the kernel says it is idle: wait for that message (and for
    # the kernel's start) as long as a cell may run. nbclient's defaults give up on the outputs after
    # 4 s and go on without them, silently, and on a start after 60 s, which a loaded machine can take.
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                                     startup_timeout=300, iopub_timeout=300, raise_on_iopub_timeout=True,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return nb.cells


def outputs(cell, mime):
    texts = []
    for out in cell.outputs:
        if out.get("output_type") in ("display_data", "execute_result") and mime in out.get("data", {}):
            texts.append(out["data"][mime])
    return texts


def table_calls(text, api):
    """The calls column of api's row in tw-report's text table."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == api:
            return int(fields[1])
    return None


PRELUDE = """
import torch
torch.manual_seed(0)
x = torch.ones(4, 4)
%load_ext torchwrapper
"""


def test_a_profiled_cell_shows_its_apis_with_exact_counts_in_text_and_html(tmp_path):
    cells = run_notebook([PRELUDE, "%%torchwrapper --top 5\nfor _ in range(7):\n    y = torch.mm(x, x)\nz = x.sum()",
                          "%%torchwrapper -o out2 --set format=csv\nfor _ in range(3):\n    torch.relu(x)",
                          "%torchwrapper torch.mm(x, x)"], tmp_path)
    assert not [o for c in cells for o in c.outputs if o.get("output_type") == "error"]
    (text,) = outputs(cells[1], "text/plain")
    assert table_calls(text, "torch.mm") == 7 and table_calls(text, "torch.Tensor.sum") == 1
    (page,) = outputs(cells[1], "text/html")
    document = html.unescape(re.search(r'srcdoc="([^"]*)"', page).group(1))
    assert "torch.mm" in document and "<svg" in document   # the table and the flame graph
    assert not re.search(r'(src|href)="https?:', document)   # nothing fetched: styles and scripts are inline
    # a second cell, profiled again, into the directory given
    (text2,) = outputs(cells[2], "text/plain")
    assert table_calls(text2, "torch.relu") == 3 and table_calls(text2, "torch.mm") is None
    assert any(name.endswith(".csv") for name in os.listdir(tmp_path / "out2"))
    (text3,) = outputs(cells[3], "text/plain")
    assert table_calls(text3, "torch.mm") == 1


def test_a_raising_cell_shows_what_it_recorded_and_torch_is_restored(tmp_path):
    cells = run_notebook([PRELUDE, "%%torchwrapper\ntorch.mm(x, x)\ntorch.mm(x, x)\nraise ValueError('boom')\ntorch.mm(x, x)",
                          "import torchwrapper\nprint(torchwrapper._core.active_session() is None, "
                          "type(torch.mm).__name__)"], tmp_path)
    errors = [o for o in cells[1].outputs if o.get("output_type") == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "ValueError"
    (text,) = outputs(cells[1], "text/plain")
    assert table_calls(text, "torch.mm") == 2
    stream = "".join(o.get("text", "") for o in cells[2].outputs if o.get("output_type") == "stream")
    assert stream.split() == ["True", "builtin_function_or_method"]


def test_profile_results_render_as_the_report_page(tmp_path):
    cells = run_notebook([PRELUDE, "import torchwrapper as tw\nwith tw.profile(out_dir='p') as prof:\n"
                          "    torch.mm(x, x)\nprof",
                          "w = tw.TorchWrapper({'out_dir': 'w', 'format': 'csv'})\nw.start(lambda: torch.mm(x, x))\nw"],
                         tmp_path)
    for cell in cells[1:]:
        assert not [o for o in cell.outputs if o.get("output_type") == "error"], cell.outputs
        (page,) = outputs(cell, "text/html")
        assert "torch.mm" in html.unescape(re.search(r'srcdoc="([^"]*)"', page).group(1))


def test_bad_options_are_named(tmp_path):
    without = run_notebook(["%%torchwrapper\n1 + 1"], tmp_path)   # no %load_ext: IPython says so
    said = "".join(o.get("text", "") + o.get("evalue", "") for o in without[0].outputs)
    assert "UsageError: Cell magic `%%torchwrapper` not found." in said
    cells = run_notebook([PRELUDE, "%%torchwrapper --top 0\nx + 1", "%%torchwrapper --set format=xml\nx + 1",
                          "%torchwrapper"], tmp_path)
    messages = [" ".join(o.get("evalue", "") for o in c.outputs if o.get("output_type") == "error") for c in cells[1:]]
    assert "--top 0 is not accepted: give a whole number >= 1" in messages[0]
    assert "format" in messages[1] and "xml" in messages[1]
    assert "needs a statement to profile" in messages[2]


def test_a_profiled_cell_ends_with_its_findings_in_text_and_html(tmp_path):
    train = """%%torchwrapper
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    loss = model(x).sum()
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()"""
    cells = run_notebook([PRELUDE, train], tmp_path)
    assert not [o for c in cells for o in c.outputs if o.get("output_type") == "error"]
    (text,) = outputs(cells[1], "text/plain")
    finding = [line for line in text.splitlines() if "zero_grad_fills" in line]
    assert finding and ":6 " in finding[0]   # the cell's line 6 (the magic's line is not the cell's code)
    (page,) = outputs(cells[1], "text/html")
    document = html.unescape(re.search(r'srcdoc="([^"]*)"', page).group(1))
    assert '<section id="findings">' in document and "zero_grad_fills" in document
    assert document.index('id="findings"') < document.index('id="summary"')   # the page opens with them
