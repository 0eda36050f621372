# SPDX-License-Identifier: MIT
"""tw-report --diff and torchwrapper.diff on real training loops: a planted slowdown of one API is
found, sorted first and gates CI; the same program run twice shows nothing beyond noise.

The runs compared go side by side and take turns step by step (diff_program.py): on this shared
2-core machine other programs' load comes and goes within seconds, and two runs made one after the
other would differ by that load, for every API (a real difference between the runs, but not one a
test of --diff can expect either way). Taking turns puts the same load on every run, as a CI job
that runs BASE and NEW on one machine under the same conditions would.
"""
import csv
import io
import json
import os
import subprocess
import sys

import pytest

import torchwrapper as tw

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("top_builddir", os.path.join(HERE, "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
PROGRAM = os.path.join(HERE, "diff_program.py")
STEPS = 60  # 58 compared per run: the first (warm-up) and the last are left out by default


def run_in_turns(out_dirs_and_variants, steps=STEPS):
    """Runs diff_program.py once per (out_dir, variant), all at once, each step in turn around a ring."""
    n = len(out_dirs_and_variants)
    pipes = [os.pipe() for _ in range(n)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = []
    try:
        for i, (out_dir, variant) in enumerate(out_dirs_and_variants):
            read_fd, write_fd = pipes[i][0], pipes[(i + 1) % n][1]
            procs.append(subprocess.Popen([sys.executable, PROGRAM, str(out_dir), variant, str(steps), str(read_fd),
                                           str(write_fd)], pass_fds=(read_fd, write_fd), env=env,
                                          stderr=subprocess.PIPE, text=True))
        os.write(pipes[0][1], b"x")
        for _, write_fd in pipes:  # a run whose neighbour died reads EOF instead of waiting forever
            os.close(write_fd)
        for p in procs:
            _, err = p.communicate(timeout=600)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for read_fd, _ in pipes:  # held to the end: the last run's last byte needs a reader
            os.close(read_fd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Four runs side by side: the program twice, the program with a larger matmul, and with Tanh."""
    root = tmp_path_factory.mktemp("diff")
    dirs = {name: root / name for name in ("base", "again", "slow", "tanh")}
    run_in_turns([(dirs["base"], "base"), (dirs["again"], "base"), (dirs["slow"], "slow"),
                  (dirs["tanh"], "tanh")])
    return dirs


def report(*args, check=True):
    done = subprocess.run([TW_REPORT, *map(str, args)], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def diff_json(base, new, *args):
    return json.loads(report("--diff", base, new, "--format", "json", *args).stdout)


def shown(result):
    """The diff's first rows, for a failing assertion's message."""
    return "\n".join(f"{r['api']} {r['verdict']} {r['change_pct_of_step']}% of step p={r['p_value']}"
                     for r in result["rows"][:8]) + f"\nbase {result['base']}\nnew {result['new']}"


def flagged(result):
    return {r["api"]: r["verdict"] for r in result["rows"] if r["verdict"] in ("regression", "improvement")}


def test_a_planted_slowdown_of_one_api_is_a_regression_and_sorted_first(runs):
    result = diff_json(runs["base"], runs["slow"])
    first = result["rows"][0]
    assert (first["api"], first["verdict"]) == ("torch.mm", "regression"), shown(result)
    assert first["p_value"] < result["alpha"]
    assert first["new_median_self_ns"] > first["base_median_self_ns"]
    assert first["change_pct_of_step"] >= result["min_change_pct"]
    assert first["base_calls_per_step"] == first["new_calls_per_step"] == 1  # slower, not called more
    # Nothing else in the program changed, and nothing else is called changed.
    assert flagged(result) == {"torch.mm": "regression"}, shown(result)
    assert result["base"]["steps"] == result["new"]["steps"] == STEPS - 2
    assert (result["base"]["first_step"], result["base"]["last_step"]) == (1, STEPS - 2)


def test_the_same_program_run_twice_shows_nothing_beyond_noise(runs):
    result = diff_json(runs["base"], runs["again"])
    assert flagged(result) == {}, shown(result)
    assert {r["verdict"] for r in result["rows"]} == {"same"}
    # The APIs are those of the program (the test compared something), in both runs.
    assert {"torch.mm", "torch.nn.Linear.forward", "torch.optim.SGD.step"} <= {r["api"] for r in result["rows"]}
    assert all(r["base_calls_per_step"] == r["new_calls_per_step"] for r in result["rows"])


def test_fail_above_exits_1_on_the_slowdown_only_and_says_why(runs):
    slow = report("--diff", runs["base"], runs["slow"], "--fail-above", "4", check=False)
    assert slow.returncode == 1, slow.stdout
    assert "--fail-above 4: torch.mm is slower" in slow.stderr
    assert "torch.mm" in slow.stdout  # the table is still printed
    same = report("--diff", runs["base"], runs["again"], "--fail-above", "0", check=False)
    assert same.returncode == 0, same.stderr
    assert same.stderr == ""
    # A threshold above the regression's share of the step: reported, but no failure.
    share = diff_json(runs["base"], runs["slow"])["rows"][0]["change_pct_of_step"]
    above = report("--diff", runs["base"], runs["slow"], "--fail-above", f"{share + 1:.2f}", "--format", "json")
    assert json.loads(above.stdout)["rows"][0]["verdict"] == "regression"
    assert json.loads(above.stdout)["failed"] is False


def test_apis_that_appear_and_vanish_are_listed(runs):
    verdicts = {r["api"]: r["verdict"] for r in diff_json(runs["base"], runs["tanh"])["rows"]}
    assert verdicts["torch.nn.Tanh.forward"] == "appeared"
    assert verdicts["torch.tanh"] == "appeared"
    assert verdicts["torch.nn.ReLU.forward"] == "vanished"
    assert verdicts["torch.relu"] == "vanished"
    back = {r["api"]: r["verdict"] for r in diff_json(runs["tanh"], runs["base"])["rows"]}
    assert back["torch.tanh"] == "vanished" and back["torch.relu"] == "appeared"
    rows = diff_json(runs["base"], runs["tanh"])["rows"]
    tanh = next(r for r in rows if r["api"] == "torch.tanh")
    assert tanh["base_calls_per_step"] == 0 and tanh["new_calls_per_step"] == 1
    assert tanh["self_change_pct"] is None  # a change in percent of nothing


def test_csv_json_markdown_and_table_give_the_same_rows(runs):
    base, new = runs["base"], runs["slow"]
    rows = list(csv.DictReader(io.StringIO(report("--diff", base, new, "--format", "csv").stdout)))
    assert list(rows[0]) == tw.DIFF_COLUMNS
    as_json = diff_json(base, new)["rows"]
    assert [r["api"] for r in rows] == [r["api"] for r in as_json]
    for c, j in zip(rows, as_json):
        assert c["verdict"] == j["verdict"]
        assert float(c["change_ns"]) == j["change_ns"]
        assert (c["p_value"] == "") == (j["p_value"] is None)
    markdown = report("--diff", base, new, "--format", "markdown").stdout.splitlines()
    table = [line for line in markdown if line.startswith("|")]
    assert set(table[1]) <= set("|-: ")
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    assert all(len(row) == len(cells[0]) for row in cells)
    assert [row[0] for row in cells[2:]] == [r["api"] for r in rows]
    assert [row[1] for row in cells[2:]] == [r["verdict"] for r in rows]
    text = report("--diff", base, new, "--top", "3").stdout
    assert text.startswith(f"BASE  {base}: {STEPS - 2} steps compared (1-{STEPS - 2})")
    body = text.split("\n\n")[1].splitlines()
    assert body[0].split()[:3] == ["api", "verdict", "change"]
    assert [line.split()[0] for line in body[1:]] == [r["api"] for r in rows[:3]]


def test_steps_apply_to_both_runs(runs):
    result = diff_json(runs["base"], runs["again"], "--steps", "10:29")
    for side in ("base", "new"):
        assert (result[side]["steps"], result[side]["first_step"], result[side]["last_step"]) == (20, 10, 29)
    few = report("--diff", runs["base"], runs["again"], "--steps", "3:9")
    assert "7 steps in BASE and 7 in NEW are too few for any change to be beyond noise" in few.stderr
    # With --steps A: the last step is kept too.
    result = diff_json(runs["base"], runs["again"], "--steps", "5:")
    assert (result["base"]["first_step"], result["base"]["last_step"]) == (5, STEPS - 1)


def test_bad_values_and_inputs_get_clear_errors(runs, tmp_path):
    base, new = runs["base"], runs["again"]
    for option, value, accepted in [("--fail-above", "abc", "a number >= 0"), ("--fail-above", "-3", "a number >= 0"),
                                    ("--alpha", "1.5", "between 0 and 1"), ("--alpha", "x", "between 0 and 1"),
                                    ("--min-change", "-1", "a number >= 0")]:
        done = report("--diff", base, new, option, value, check=False)
        assert done.returncode == 2
        assert f"{option} '{value}' is not accepted" in done.stderr and accepted in done.stderr
    missing = tmp_path / "no-such-run"
    done = report("--diff", missing, new, check=False)
    assert done.returncode == 1 and f"{missing}: No such file or directory" in done.stderr
    done = report("--diff", base, check=False)
    assert done.returncode == 2 and "give NEW's directory or record files too" in done.stderr
    done = report("--diff", base, new, "--tree", "3", check=False)
    assert done.returncode == 2 and "does not go with --tree" in done.stderr
    # Records written before the step column: a clear error naming the file (no guessing of steps).
    old = tmp_path / "old"
    old.mkdir()
    source = next(p for p in sorted(os.listdir(base)) if p.endswith(".csv"))
    with open(base / source, newline="") as f, open(old / "old.csv", "w", newline="") as g:
        rows = list(csv.reader(f))
        # the columns the copy leaves out: step and those after it
        assert rows[0][-10:] == ["step", "site", "fwd_call_id", "fwd_api", "flops", "flops_total", "mem_alloc",
                                 "mem_self", "mem_freed", "mem_peak"]
        csv.writer(g, lineterminator="\n").writerows(row[:-10] for row in rows)
    done = report("--diff", old, new, check=False)
    assert done.returncode == 1
    assert f"{old / 'old.csv'} (BASE) has no step column" in done.stderr
    with pytest.raises(ValueError, match="has no step column"):
        tw.diff(old, new)
    with pytest.raises(FileNotFoundError, match="no-such-run"):
        tw.diff(base, missing)
    with pytest.raises(ValueError, match=r"--fail-above 'abc' is not accepted.*a number >= 0"):
        tw.diff(base, new, fail_above="abc")


def test_python_diff_is_the_csv_as_a_dataframe(runs):
    import pandas

    frame = tw.diff(runs["base"], runs["slow"])
    from_csv = pandas.read_csv(io.StringIO(report("--diff", runs["base"], runs["slow"], "--format", "csv").stdout))
    assert list(frame.columns) == list(from_csv.columns) == tw.DIFF_COLUMNS
    pandas.testing.assert_frame_equal(frame, from_csv, check_dtype=False)
    assert frame.iloc[0]["api"] == "torch.mm" and frame.iloc[0]["verdict"] == "regression"
    assert frame.attrs["base"]["steps"] == STEPS - 2 and frame.attrs["failed"] is False
    gated = tw.diff(runs["base"], runs["slow"], fail_above=4, top=2)
    assert len(gated) == 2 and gated.attrs["failed"] is True
    assert gated.iloc[0]["fail_above"] == 1


def test_html_with_two_runs_shows_the_diff(runs, tmp_path):
    """--html with --diff: one page whose table has the same rows, in the same order, as the JSON,
    the planted regression first and marked as one."""
    from html.parser import HTMLParser

    page = tmp_path / "diff.html"
    result = json.loads(report("--diff", runs["base"], runs["slow"], "--format", "json", "--html", page).stdout)

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.in_table, self.cell = [], False, None

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "table" and attrs.get("id") == "diff-table":
                self.in_table = True
            elif self.in_table and tag == "tr" and "class" in attrs:
                self.rows.append([attrs["class"]])
            elif self.in_table and tag == "td":
                self.cell = ""

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

        def handle_endtag(self, tag):
            if tag == "td" and self.cell is not None:
                self.rows[-1].append(self.cell)
                self.cell = None
            elif tag == "table":
                self.in_table = False

    parser = Rows()
    parser.feed(page.read_text())
    assert [(row[0], row[1]) for row in parser.rows] == [(r["verdict"], r["api"]) for r in result["rows"]]
    assert parser.rows[0][:3] == ["regression", "torch.mm", "regression"]
    assert "http" not in page.read_text().replace("http-equiv", "")  # nothing fetched from anywhere
    done = report("--diff", runs["base"], runs["slow"], "--flamegraph", tmp_path / "f.svg", check=False)
    assert done.returncode == 2 and "does not go with --flamegraph" in done.stderr
