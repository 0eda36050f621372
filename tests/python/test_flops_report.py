# SPDX-License-Identifier: MIT
"""FLOPs (config flops) beyond the counts: the config (flops off, peak_flops, from the environment),
the files and manifest that carry them, and the reports: tw-report's GFLOP, FLOP/s and MFU columns
(table, CSV, HTML, --sort flops, --by module), n/a for the APIs that compute without a formula,
tw.flops_table, and the GPU peak table. The counts themselves, against FlopCounterMode, and the models
and helpers used here are test_flops.py's."""
import collections
import json
import os

import pytest
import torch

import torchwrapper as tw

from test_flops import LAYER, MLP, ResNet, _resnet_batch, counter, is_node, module_flops

pytestmark = pytest.mark.skipif(not os.path.exists(LAYER), reason="the libtorch layer was not built (configure)")


def test_flops_off_and_in_no_grad():
    model, x = MLP(), torch.randn(7, 12)
    with tw.profile(flops=False) as prof:
        model(x).sum().backward()
    assert prof.session.stats()["flops"] == "off"
    assert not any(r.flops or r.flops_total for r in prof.records())
    with counter() as fc:
        model(x)
    with tw.profile() as prof:
        with torch.no_grad():
            model(x)
    assert sum(r.flops for r in prof.records()) == fc.get_total_flops() > 0
    # without backward nodes (aten "off") the forward calls still count theirs
    with tw.profile(aten="off") as prof:
        model(x).sum().backward()
    assert prof.session.stats()["flops"] == "on"
    assert sum(r.flops for r in prof.records()) == fc.get_total_flops()


def test_files_and_manifest_carry_flops_and_the_peak(tmp_path):
    model, x = MLP(), torch.randn(7, 12)
    for fmt in ("csv", "json"):
        out = str(tmp_path / fmt)
        with tw.profile(out_dir=out, format=fmt, peak_flops=5e12) as prof:
            model(x).sum().backward()
        frame = tw.load(out)
        assert frame["flops"].sum() == sum(r.flops for r in prof.records()) > 0
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        assert manifest["peak_flops"] == 5e12 and manifest["config"]["peak_flops"] == 5e12
        assert frame.attrs["peak_flops"] == 5e12


@pytest.mark.parametrize("config,message", [
    ({"peak_flops": -1}, "config key 'peak_flops': -1 is not accepted: give the device's peak in FLOP/s, a number "
                         "more than 0"),
    ({"peak_flops": "fast"}, "config key 'peak_flops': \"fast\" is not accepted"),
    ({"peak_flops": 0}, "config key 'peak_flops': 0 is not accepted"),
    ({"flops": "yes"}, "config key 'flops': \"yes\" is not accepted: give true or false"),
    ({"flops": 1}, "config key 'flops': 1 is not accepted: give true or false"),
])
def test_bad_flops_config_names_key_value_and_what_is_accepted(config, message):
    with pytest.raises(ValueError) as error:
        tw.profile(**config)
    assert message in str(error.value)
    with pytest.raises(ValueError) as error:
        tw.TorchWrapper(config)
    assert message in str(error.value)


def test_flops_from_environment_strings():
    c = tw.load_config({}, environ={"TORCHWRAPPER_FLOPS": "off", "TORCHWRAPPER_PEAK_FLOPS": "1.5e14"})
    assert c["flops"] is False and c["peak_flops"] == 1.5e14
    with pytest.raises(ValueError, match="config key 'peak_flops': \"-3\" is not accepted"):
        tw.load_config({}, environ={"TORCHWRAPPER_PEAK_FLOPS": "-3"})


# ---- reports -------------------------------------------------------------------------------------

TW_REPORT = os.path.join(os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", "..")),
                         "tw-report")


def _profiled_run(out):
    torch.manual_seed(0)
    model = ResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tw.profile(out_dir=out, format="csv", peak_flops=2e12) as prof:
        for step in range(2):
            x, loss_of = _resnet_batch(step)
            opt.zero_grad()
            loss_of(model(x)).backward()
            opt.step()
    return prof.records()


def test_report_table_html_and_flops_table_show_flops_flop_s_and_mfu(tmp_path):
    import csv
    import subprocess

    out = str(tmp_path / "run")
    records = _profiled_run(out)
    nodes = [r for r in records if is_node(r)]
    expected = collections.defaultdict(lambda: [0, 0, 0, 0])   # api: flops, bwd_flops, time, bwd time
    for r in records:
        if is_node(r):
            expected[r.fwd_api][1] += r.flops
            expected[r.fwd_api][3] += r.cost_ns
        if not is_node(r) or r.fwd_call_id == 0:
            expected[r.api][0] += r.flops
            expected[r.api][2] += r.cost_ns
    done = subprocess.run([TW_REPORT, out, "--format", "csv"], capture_output=True, text=True, check=True)
    rows = {row["api"]: row for row in csv.DictReader(done.stdout.splitlines())}
    conv = rows["torch.conv2d"]
    flops, bwd_flops, time_ns, bwd_ns = expected["torch.conv2d"]
    assert int(conv["flops"]) == flops > 0 and int(conv["bwd_flops"]) == bwd_flops > 0
    assert int(conv["bwd_ns"]) == bwd_ns
    rate = (flops + bwd_flops) * 1e9 / (int(conv["total_ns"]) + bwd_ns)
    assert float(conv["flop_s"]) == pytest.approx(rate, rel=1e-5)
    assert float(conv["mfu"]) == pytest.approx(rate / 2e12, rel=1e-4)
    # the nodes' own rows carry their FLOPs too; the APIs without FLOPs have none
    assert int(rows["ConvolutionBackward0"]["flops"]) == sum(r.flops for r in nodes if r.api == "ConvolutionBackward0")
    assert int(rows["torch.relu"]["flops"]) == 0 and rows["torch.relu"]["flop_s"] == "0"
    text = subprocess.run([TW_REPORT, out, "--top", "5"], capture_output=True, text=True, check=True).stdout
    assert "GFLOP" in text.splitlines()[0] and "MFU %" in text.splitlines()[0]
    # --sort flops: the groups with the most FLOPs (forward and charged backward) first
    done = subprocess.run([TW_REPORT, out, "--format", "csv", "--sort", "flops"], capture_output=True, text=True,
                          check=True)
    ranked = [int(row["flops"]) + int(row["bwd_flops"]) for row in csv.DictReader(done.stdout.splitlines())]
    assert ranked == sorted(ranked, reverse=True) and ranked[0] == flops + bwd_flops
    html = str(tmp_path / "report.html")
    subprocess.run([TW_REPORT, out, "--html", html], capture_output=True, text=True, check=True)
    with open(html) as f:
        page = f.read()
    assert page.count("<th class=\"num\">GFLOP</th>") == 2 and "fwd MFU %" in page
    # --by module: a row per module, its forward calls' FLOPs with the backward of it and of the modules
    # inside it (the model's row: every module's), as module_flops() counts them from the records
    fwd, both = module_flops(records)
    done = subprocess.run([TW_REPORT, out, "--format", "csv", "--by", "module"], capture_output=True, text=True,
                          check=True)
    rows = {row["module"]: row for row in csv.DictReader(done.stdout.splitlines())}
    assert "ResNet.layer2.down.0" in rows and "ResNet" in rows
    for key, row in rows.items():
        assert int(row["flops"]) == fwd[key] and int(row["flops"]) + int(row["bwd_flops"]) == both[key], key
    # load(): the peak from the manifest, and the same numbers per API; per module as in the test above
    frame = tw.load(out)
    assert frame.attrs["peak_flops"] == 2e12
    table = tw.flops_table(frame)
    assert table.loc["torch.conv2d", "flops"] == flops and table.loc["torch.conv2d", "bwd_flops"] == bwd_flops
    assert table.loc["torch.conv2d", "mfu"] == pytest.approx(rate / 2e12, rel=1e-9)
    modules = tw.flops_table(frame, by="module")
    assert "ResNet" in modules.index
    for path, row in modules.iterrows():
        assert row["total_flops"] == both[path]
    steps = tw.flops_table(out, by="step")
    assert list(steps.index) == [0, 1]
    assert steps["total_flops"].sum() == sum(r.flops for r in records)


def test_report_says_n_a_for_apis_that_compute_without_a_formula(tmp_path):
    import csv
    import re
    import subprocess

    out = str(tmp_path / "run")
    torch.manual_seed(0)
    model, x, a = MLP(), torch.randn(7, 12), torch.randn(6, 6)
    with tw.profile(out_dir=out, format="csv", peak_flops=1e12) as prof:
        model(x).sum().backward()
        torch.tensordot(torch.randn(3, 4, 5), torch.randn(4, 5, 6), dims=2)   # FlopCounterMode: its mm
        torch.linalg.solve(a @ a.T + torch.eye(6), torch.randn(6, 2))
        torch.fft.rfft(torch.randn(64))
        torch.relu(x)   # elementwise: 0 by FlopCounterMode's rule too, not n/a
    counted = {r.api for r in prof.records() if r.flops}
    assert "torch.nn.functional.linear" in counted and "torch.tensordot" not in counted
    unknown = {"torch.tensordot", "torch.linalg.solve", "torch.fft.rfft"}

    def report(*args):
        return subprocess.run([TW_REPORT, out, *args], capture_output=True, text=True, check=True).stdout

    lines = {line.split()[0]: line for line in report().splitlines()[1:] if line.startswith("torch.")}
    for api in unknown:
        assert re.search(r"\s+n/a(\s|$)", lines[api]), lines[api]
    assert "n/a" not in lines["torch.relu"] and "n/a" not in lines["torch.Tensor.__matmul__"]
    assert "n/a" not in lines["torch.nn.functional.linear"]
    assert re.search(r"\| +n/a \|", report("--format", "markdown"))
    rows = {row["api"]: row for row in csv.DictReader(report("--format", "csv").splitlines())}
    for api in unknown:   # empty, not 0
        assert [rows[api][k] for k in ("flops", "bwd_flops", "flop_s", "mfu")] == ["", "", "", ""], api
    assert rows["torch.relu"]["flops"] == "0" and int(rows["torch.nn.functional.linear"]["flops"]) > 0
    rows = {row["key"]: row for row in json.loads(report("--format", "json"))["rows"]}
    for api in unknown:
        assert [rows[api][k] for k in ("flops", "bwd_flops", "flop_s", "mfu")] == [None] * 4, api
    assert rows["torch.relu"]["flops"] == 0
    html = str(tmp_path / "report.html")
    report("--html", html)
    with open(html) as f:
        page = f.read()
    assert page.count("<td>n/a</td>") == len(unknown)
    # the list is searched by bisection: it must stay sorted
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "src", "report", "table.c")) as f:
        source = f.read()
    listed = re.findall(r'"([^"]+)"', source[source.index("uncounted_apis[] = {"):source.index("};", source.index(
        "uncounted_apis[] = {"))])
    assert listed == sorted(set(listed)) and unknown <= set(listed)


def test_the_gpu_table_names_known_gpus_and_a_given_peak_wins():
    from torchwrapper import _flops

    assert _flops.gpu_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert _flops.gpu_peak("NVIDIA H100 PCIe") == 756e12
    assert _flops.gpu_peak("NVIDIA H200") == 989e12
    assert _flops.gpu_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert _flops.gpu_peak("Some Future GPU") is None
    assert _flops.peak_flops(3e12) == (3e12, "config")
    if not torch.cuda.is_available():   # on a CPU, MFU only with a peak given
        peak, why = _flops.peak_flops(None)
        assert peak is None and "on a CPU, MFU needs one" in why
