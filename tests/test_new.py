"""`warpsmith new` / `review` against the scripted model server (OpenAIServerDouble
stands in for a paid model): a sentence becomes a valid workload directory, a
broken draft is repaired, a reference is trusted only after the user's yes and an
agreeing independent second draft, and `run` refuses a draft."""

from __future__ import annotations

import pytest
from openai_server_double import OpenAIServerDouble
from package_env import child_env
from workload_factory import ROOT

from warpsmith.agent.cli.commands import main
from warpsmith.agent.spec.workload import load_workload

TOML = '''[workload]
name = "vadd"
description = "Element-wise sum of two float32 vectors: c = a + b."
reference = "reference.py"
reference_status = "drafted"

[[params]]
name = "a"
role = "input"
dtype = "float32"
shape = ["n"]

[[params]]
name = "b"
role = "input"
dtype = "float32"
shape = ["n"]

[[params]]
name = "c"
role = "output"
dtype = "float32"
shape = ["n"]

[[params]]
name = "n"
role = "scalar"
dtype = "int32"
value = "n"

[tolerance]
allow_tf32 = false

[metrics]
flops = "n"
bytes = "12 * n"

[kernels.naive]
source = "naive.cu"
entry = "vadd"
grid = ["ceil_div(n, 256)", 1, 1]
block = [256, 1, 1]

[[cases]]
name = "odd-1001"
role = "correctness"
sizes = { n = 1001 }

[[cases]]
name = "big"
role = "performance"
sizes = { n = 268435456 }
'''
KERNEL = 'extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {\n' \
         '  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i];\n}\n'
REF = "import numpy as np\n\ndef reference(a, b, *, n):\n    return a + b\n"


def draft(toml=TOML):
    return {"name": "vadd", "workload_toml": toml, "reference_py": REF, "kernel_cu": KERNEL, "kernel_file": "naive.cu"}


def second(body: str):
    return {"reference_py": f"import numpy as np\n\ndef reference(a, b, *, n):\n    {body}\n"}


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000-secret")


def new(server, d, *extra):
    return main(["new", "Add two vectors", str(d), "--base-url", server.base_url, "--model", "m", *extra])


def test_sentence_becomes_a_reviewed_workload_with_yes(tmp_path, capsys):
    d = tmp_path / "vadd"
    with OpenAIServerDouble([draft(), second("return np.add(a, b)")]) as server:
        assert new(server, d, "--yes") == 0
    w = load_workload(d)
    assert w.reference_status == "reviewed" and list(w.kernels) == ["naive"]
    out = capsys.readouterr().out
    assert "def reference(a, b, *, n)" in out and "- odd-1001 (correctness)" in out
    assert "reviewed: an independent second reference agrees on odd-1001" in out  # 'big' is too big for the CPU
    second_prompt = server.requests[1]["messages"][1]["content"]
    assert second_prompt.startswith("Add two vectors") and "def reference(a, b, *, n)" in second_prompt
    assert "return a + b" not in second_prompt  # it never sees the first draft
    code = main(["eval", str(d)])  # accepted: it goes on to look for a GPU (3 here), not a spec error (2)
    assert code in (0, 1, 3) and "review" not in capsys.readouterr().err


def test_broken_toml_is_sent_back_and_repaired(tmp_path, capsys):
    d = tmp_path / "vadd"
    broken = TOML.replace('shape = ["n"]\n\n[[params]]\nname = "c"', 'shape = ["n"\n\n[[params]]\nname = "c"', 1)
    with OpenAIServerDouble([draft(broken), draft(), second("return a + b")]) as server:
        assert new(server, d, "--yes") == 0
    repair = server.requests[1]["messages"][-1]["content"]
    assert repair.startswith("That draft fails the spec checker:") and "(syntax)" in repair
    assert "draft 1: " in capsys.readouterr().out


def test_disagreeing_references_block_the_run(tmp_path, capsys):
    d = tmp_path / "vadd"
    with OpenAIServerDouble([draft(), second("return a - b")]) as server:
        assert new(server, d, "--yes") == 1
    out = capsys.readouterr().out
    assert "the two references disagree; the workload stays drafted" in out
    assert "first draft" in out and "| second draft" in out and "return a - b" in out
    assert load_workload(d).reference_status == "drafted"
    assert main(["run", str(d), "--headless", "--no-tracking"]) == 2
    assert "the reference is a model's draft, not reviewed: run `warpsmith review" in capsys.readouterr().err


def test_no_consent_no_python_runs(tmp_path, monkeypatch, capsys):
    """Without the user's yes nothing model-written runs: no second draft is asked for."""
    d = tmp_path / "vadd"
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    with OpenAIServerDouble([draft()]) as server:
        assert new(server, d) == 1
    assert len(server.requests) == 1 and not (d / ".review").exists()
    assert "stays drafted" in capsys.readouterr().out


async def test_review_screen_shows_the_draft_and_answers_yes_or_no(tmp_path):
    """The app's review screen: the drafted reference and the cases; y consents, n does not."""
    from textual.widgets import Static

    from warpsmith.agent.drafting.drafting import WorkloadDraft, write_draft
    from warpsmith.tui.screens.review import ReviewApp
    d = tmp_path / "vadd"
    write_draft(d, WorkloadDraft(**draft()))
    w = load_workload(d)
    for key, expected in (("y", True), ("n", False)):
        app = ReviewApp(w, "May it run?")
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(0.2)
            cases = str(app.screen.query_one("#cases").query_one(Static).content)
            assert "odd-1001 (correctness)" in cases and "n=268435456" in cases
            await pilot.press(key)
            await pilot.pause(0.2)
        assert app.return_value is expected


def test_nothing_small_enough_to_compare_keeps_it_drafted(tmp_path, capsys):
    d = tmp_path / "vadd"
    only_big = TOML.replace('name = "odd-1001"\nrole = "correctness"\nsizes = { n = 1001 }', 'name = "odd"\nrole = "correctness"\nsizes = { n = 268435457 }')
    with OpenAIServerDouble([draft(only_big), second("return a + b")]) as server:
        assert new(server, d, "--yes") == 1
    assert "no case is small enough to compare" in capsys.readouterr().out
    assert load_workload(d).reference_status == "drafted"


def test_a_draft_cannot_mark_itself_reviewed(tmp_path):
    """Whatever the drafted TOML says (single quotes, a comment after [workload]), a draft stays drafted."""
    from warpsmith.agent.drafting.drafting import WorkloadDraft, write_draft
    sly = TOML.replace('reference_status = "drafted"', "reference_status = 'reviewed'").replace("[workload]", "[workload]  # ok")
    write_draft(tmp_path / "w", WorkloadDraft(**draft(sly)))
    assert load_workload(tmp_path / "w").reference_status == "drafted"


def test_a_nan_in_one_reference_is_a_disagreement(tmp_path, capsys):
    d = tmp_path / "vadd"
    with OpenAIServerDouble([draft(), second("c = a + b\n    c[3] = np.nan\n    return c")]) as server:
        assert new(server, d, "--yes") == 1
    assert "the two references disagree" in capsys.readouterr().out


def test_the_format_example_shown_to_the_model_is_a_valid_workload(tmp_path):
    import shutil

    from workload_factory import SGEMM

    from warpsmith.agent.drafting.drafting import EXAMPLE
    shutil.copy(EXAMPLE, tmp_path / "workload.toml")
    for name in ("reference.py", "naive.cu"):
        shutil.copy(SGEMM / name, tmp_path / name)
    assert list(load_workload(tmp_path).kernels) == ["naive"]


@pytest.mark.parametrize("command", ["new", "review"])
def test_unreachable_server_is_one_line_naming_the_url(tmp_path, command):
    """`new` / `review` with a --base-url nobody listens on: exit 2, one line with the URL, no
    traceback, no key."""
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from warpsmith.agent.drafting.drafting import WorkloadDraft, write_draft
    with socket.socket() as s:  # a closed port: bound, then released
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    d = tmp_path / "vadd"
    if command == "review":
        write_draft(d, WorkloadDraft(**draft()))
    args = ["new", "Add two vectors", str(d)] if command == "new" else ["review", str(d)]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-P", "-m", "warpsmith.tui", *args, "--base-url", url, "--yes"], capture_output=True,
                          text=True, cwd=root, env=child_env(), timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"warpsmith: error: cannot reach the model server at {url} (connection refused); "
                           "check --base-url or start the server\n")
    assert "sk-double-0000-secret" not in done.stdout + done.stderr


def test_review_without_a_key_names_review(monkeypatch, capsys):
    """The missing key is reported for the command the user ran, not for `new`."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["review", str(ROOT / "examples" / "sgemm")]) == 2
    err = capsys.readouterr().err
    assert "warpsmith review needs OPENAI_API_KEY" in err and "warpsmith new" not in err
