# SPDX-License-Identifier: MIT
"""An optimizer's step is recorded under its own class's name whatever was constructed before (issue
47, item 7). torch replaces a class's step by a hook when its first instance is made, around what
cls.step is then: AdamW inherits Adam's step, so an AdamW's steps were recorded as
torch.optim.AdamW.step when an AdamW was made before the profile began, and as torch.optim.Adam.step
when it was made during it, or after an Adam (AdamW then inherits Adam's hook). Each order runs in its
own interpreter (optimizer_names_probe.py), with real training loops."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "optimizer_names_probe.py")
STEPS = 3


def probe(**plan):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    for key in [k for k in env if k.startswith("TORCHWRAPPER_")]:
        del env[key]
    result = subprocess.run([sys.executable, PROBE, json.dumps(plan)], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


REFERENCE = dict(profile=False, during=["Adam", "AdamW"])


@pytest.fixture(scope="module")
def probes():
    """Every order's probe and the reference, started together (each is a new interpreter that imports
    torch and wraps it: mostly one core's work), as futures of their results."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        yield {name: pool.submit(probe, **plan) for name, plan in [("reference", REFERENCE), *ORDERS.items()]}


@pytest.fixture(scope="module")
def reference(probes):
    """The parameters that AdamW and Adam train to without a profile."""
    return probes["reference"].result()["params"]


ORDERS = {
    "AdamW made during the profile": dict(during=["AdamW"]),
    "AdamW made before": dict(before=["AdamW"]),
    "Adam made before, AdamW during": dict(before=["Adam"], during=["AdamW"]),
    "Adam then AdamW made before": dict(before=["Adam", "AdamW"]),
    "Adam then AdamW made during": dict(during=["Adam", "AdamW"]),
    "AdamW then Adam made during": dict(during=["AdamW", "Adam"]),
    "AdamW made during the first of two profiles": dict(during=["AdamW"], sessions=2),
    "Adam made before, AdamW during the first of two": dict(before=["Adam"], during=["AdamW"], sessions=2),
}


# A program's own optimizer class (optimizer_names_probe.Mine, a subclass of AdamW with no step of its
# own) steps with AdamW's step: named after AdamW. Made before the profile, torch put its hook in
# Mine itself, and its steps were not recorded at all.
ORDERS.update({
    "a subclass of AdamW made before": dict(before=["Mine"]),
    "a subclass of AdamW made during": dict(during=["Mine"]),
    "a subclass of AdamW made between two profiles": dict(between=["Mine"], sessions=2),
    "Adam made before, a subclass of AdamW during": dict(before=["Adam"], during=["Mine"]),
})


def step_name(name):
    return f"torch.optim.{'AdamW' if name == 'Mine' else name}.step"


@pytest.mark.parametrize("order", list(ORDERS))
def test_an_adamw_step_is_named_torch_optim_adamw_step_in_every_order(order, reference, probes):
    plan = ORDERS[order]
    got = probes[order].result()
    for session in got["sessions"]:
        trained = session["trained"]
        assert session["recorded"] == {step_name(name): STEPS for name in trained}
        assert session["getAPIName"] == {name: step_name(name) for name in trained}
        assert session["hooks"] == STEPS * len(trained)  # torch's hooks ran once a step: not hooked twice
    assert got["getAPIName"] == {name: step_name(name) for name in got["params"]}  # after the profile too
    for name in got["params"]:  # the same training as without a profile (the same steps, each once)
        if plan.get("sessions", 1) == 1:
            reference_name = "AdamW" if name == "Mine" else name
            assert got["params"][name] == reference[reference_name]


def test_under_torchwrapper_run_an_adamw_made_by_the_program_is_named_adamw(tmp_path, env):
    # run: the profile begins as the program imports torch, before it makes its AdamW
    (tmp_path / "train.py").write_text(
        "import torch, torch.nn.functional as F\n"
        "torch.optim.Adam(torch.nn.Linear(2, 2).parameters())  # an Adam first: AdamW inherits its hook\n"
        "model = torch.nn.Linear(8, 2)\n"
        "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)\n"
        "for _ in range(3):\n"
        "    optimizer.zero_grad()\n"
        "    F.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 0, 1])).backward()\n"
        "    optimizer.step()\n")
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "run", "--no-report", "-o", "out", "train.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    import torchwrapper as tw

    frame = tw.load(str(tmp_path / "out"))
    steps = frame[(frame["depth"] == 0) & frame["api"].astype(str).str.endswith(".step")]
    assert list(steps["api"].astype(str)) == ["torch.optim.AdamW.step"] * 3
