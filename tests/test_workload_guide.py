"""docs/workloads.md's example is a working workload: its blocks, written out, pass `warpsmith check`."""

import re
from pathlib import Path

from warpsmith.agent.cli.commands import main

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "workloads.md"


def test_the_guides_rowscale_example_passes_check(tmp_path, capsys):
    """workload.toml, reference.py and rowscale.cu from the guide: spec, references and compile all ok."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", GUIDE.read_text(), re.S)
    d = tmp_path / "rowscale"
    d.mkdir()
    (d / "workload.toml").write_text(next(b for lang, b in blocks if lang == "toml"))
    (d / "reference.py").write_text(next(b for lang, b in blocks if lang == "python"))
    (d / "rowscale.cu").write_text(next(b for lang, b in blocks if lang == "cuda"))
    assert main(["check", str(d), "--arch", "sm_90"]) == 0, capsys.readouterr()
    assert "kernel flat -> sm_90" in capsys.readouterr().out
