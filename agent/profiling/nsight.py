"""--use-nsight: profile a validated candidate with Nsight Compute, one launch per
performance case, in a separate process (ncu replays the kernel to collect its
counters; none of that time reaches a latency, which the evaluator measured before).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..evaluate.records import CandidateSpec, CaseProfile
from ..runtime.parent_watch import child_env, python_module
from .profiler import ProfilerUnavailable, ncu_command, parse_csv


@dataclass
class Nsight:
    workload_dir: Path
    work_dir: Path  # where the candidate's JSON and ncu's raw CSV are kept (the session's folder)
    timeout_s: float = 300.0
    ncu: Optional[str] = None

    def profile(self, spec: CandidateSpec, cases: list[str], tag: str = "candidate",
                bandwidth_gbs: float = 4800.0) -> list[CaseProfile]:
        """One CaseProfile per case, in order; `bandwidth_gbs` (the GPU's copy ceiling) judges
        how busy DRAM was. Raises ProfilerUnavailable with a one-line reason."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        spec_path = self.work_dir / f"{tag}.json"
        spec_path.write_text(spec.model_dump_json())
        program = python_module("warpsmith.agent.profiling.profile_launch", str(self.workload_dir), str(spec_path), *cases)
        cmd = ncu_command(f"^{re.escape(spec.entry)}", program, self.ncu, launches=len(cases))
        # Its own process group: on a timeout, Ctrl-C or any other way out, ncu and the
        # profiled process it started go together (killing ncu alone would orphan a
        # process holding the GPU; the group does not get the terminal's SIGINT).
        # child_env(): the profiled process watches this one and dies with it (parent_watch).
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env=child_env())
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise ProfilerUnavailable(f"ncu took longer than {self.timeout_s:g} s: skipped this candidate",
                                      transient=True) from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                try:
                    proc.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        text = stdout + "\n" + stderr
        (self.work_dir / f"{tag}.ncu.csv").write_text(stdout)
        profiles = parse_csv(text)  # raises on ERR_NVGPUCTRPERM
        if len(profiles) != len(cases):
            last = next((l for l in reversed(text.splitlines()) if l.strip()), "no output")
            raise ProfilerUnavailable(f"ncu profiled {len(profiles)} of {len(cases)} launches "
                                      f"(exit {proc.returncode}): {last[:200]}", transient=proc.returncode == 0)
        return [CaseProfile(case=case, summary=p.text(), findings=p.findings(bandwidth_gbs), metrics=p.metrics())
                for case, p in zip(cases, profiles)]
