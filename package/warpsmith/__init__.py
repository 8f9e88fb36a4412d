"""warpsmith: turns a workload description into a fast, verified CUDA kernel.

The one import package of the project. Its subpackages are the source folders, installed
under it (pyproject.toml's wheel.packages): warpsmith.agent (agent/: workloads,
evaluation, the agent loop and the CLI) and warpsmith.tui (tui/: the Textual app and the
`warpsmith` command). This file is its whole top; the links beside it put the folders
where mypy finds them under their installed names."""
