"""Judging a candidate: the evaluator (the parent's side of the GPU worker), results and statuses, the records a session keeps, timing statistics, selection of the best."""
