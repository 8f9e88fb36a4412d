"""From a sentence to a workload: the model drafts it, the user reviews it, a second draft must agree."""
