"""Guidance for the proposer from a built-in knowledge base: short notes on CUDA
optimisation (agent/knowledge/*.md), each tagged by architecture and workload
kind, retrieved by relevance to the workload and to the latest profile's
findings. Notes are cited by id in the prompt and logged with the session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

KNOWLEDGE = Path(__file__).parent / "knowledge"
KINDS = ("gemm", "attention", "softmax", "layernorm", "reduction", "transpose", "elementwise")
_KIND_WORDS = {  # first match wins: attention's description may speak of matrix products
    "attention": r"attention",
    "gemm": r"\bgemm\b|matrix multipl|matmul|\bmatrix product",
    "softmax": r"softmax",
    "layernorm": r"layer ?norm|rms ?norm|root[- ]mean[- ]square norm",
    "reduction": r"reduction|row[- ]sum|\bsum over\b|\breduce",
    "transpose": r"transpose",
}


@dataclass(frozen=True)
class Note:
    id: str
    title: str
    arch: tuple[str, ...]  # ("all",) or e.g. ("sm_80", "sm_90")
    kinds: tuple[str, ...]
    keywords: tuple[str, ...]
    body: str
    # The array dtypes the note is about (e.g. bfloat16, float16); () for any. A note
    # on 16-bit tensor cores is noise in an fp32 workload's prompt.
    dtypes: tuple[str, ...] = ()

    def cite(self) -> str:
        return f"[{self.id}] {self.title}"


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip().lower() for v in value.split(",") if v.strip())


@lru_cache(maxsize=1)
def load_notes(directory: Path = KNOWLEDGE) -> tuple[Note, ...]:
    notes = []
    for path in sorted(directory.glob("*.md")):
        text = path.read_text()
        m = re.match(r"---\n(.*?)\n---\n(.*)", text, re.S)
        if not m:
            raise ValueError(f"{path.name}: a knowledge note starts with a --- front matter block")
        meta = dict(line.split(":", 1) for line in m.group(1).splitlines() if ":" in line)
        meta = {k.strip(): v.strip() for k, v in meta.items()}
        notes.append(Note(path.stem, meta["title"], _split(meta.get("arch", "all")), _split(meta.get("kinds", "")),
                          _split(meta.get("keywords", "")), m.group(2).strip(), _split(meta.get("dtypes", ""))))
    return tuple(notes)


def workload_kind(description: str, baseline: str = "none") -> str:
    if baseline.startswith("cublas"):
        return "gemm"
    text = description.lower()
    for kind, pattern in _KIND_WORDS.items():
        if re.search(pattern, text):
            return kind
    return "elementwise"


def retrieve(kind: str, arch: str, text: str = "", findings: Iterable[str] = (), k: int = 5,
             notes: Optional[Iterable[Note]] = None, dtypes: Iterable[str] = ("float32",)) -> list[Note]:
    """The k notes most relevant to a workload kind on an architecture and its array
    dtypes, given its description and the latest profile's findings ("memory bound",
    "bank conflicts")."""
    query = (text + " " + " ".join(findings)).lower()
    present = {d.lower() for d in dtypes}
    scored = []
    for note in notes if notes is not None else load_notes():
        if "all" not in note.arch and arch.lower() not in note.arch:
            continue  # written for other architectures
        if note.dtypes and not present & set(note.dtypes):
            continue  # about data types this workload does not have
        # A note written for this kind alone outranks one that serves every kind.
        score = 2.0 + 2.0 / len(note.kinds) if kind in note.kinds else 0.0
        score += 0.25 if arch.lower() in note.arch else 0.0
        score += sum(2.0 for f in findings if any(w in f.lower() or f.lower() in w for w in note.keywords))
        score += sum(0.5 for w in note.keywords if w in query)
        if score > 0:
            scored.append((score, note.id, note))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [n for _, _, n in scored[:k]]


def guidance(notes: list[Note]) -> str:
    """The retrieved notes as a prompt section, each with its citation."""
    return "\n\n".join(f"{n.cite()}\n{n.body}" for n in notes)
