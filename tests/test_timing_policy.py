"""The timing policy has one home (agent/spec/timing_policy.py): the runner's C++ defaults
are the policy's numbers, the worker hands the runner every field of the recipe, and the
evaluator's deadline for a timing step follows the recipe it sent."""

from __future__ import annotations

import dataclasses

from warpsmith.agent.evaluate.deadlines import Deadlines
from warpsmith.agent.runtime import native
from warpsmith.agent.spec import timing_policy as policy
from warpsmith.agent.worker.gpu_side import _settings
from warpsmith.agent.worker.protocol import Started, Step


def test_the_runner_defaults_are_the_policy():
    s = native.TimingSettings()
    assert (s.warmup, s.repetitions, s.flush_l2, s.max_total_ms, s.min_repetitions, s.warmup_share) == \
        (policy.WARMUP, policy.REPETITIONS, True, policy.MAX_TOTAL_MS, policy.MIN_REPETITIONS, policy.WARMUP_SHARE)


def test_the_worker_hands_the_runner_every_field():
    odd = policy.TimingConfig(warmup=7, repetitions=33, cold_l2=False, max_total_ms=123.0, min_repetitions=4,
                              warmup_share=0.5)
    s = _settings(odd)
    assert (s.warmup, s.repetitions, s.flush_l2, s.max_total_ms, s.min_repetitions, s.warmup_share) == \
        (7, 33, False, 123.0, 4, 0.5)
    # every field of the recipe reaches the runner (a new field must be handed over too)
    assert {f.name for f in dataclasses.fields(odd)} == \
        {"warmup", "repetitions", "cold_l2", "max_total_ms", "min_repetitions", "warmup_share"}


def test_the_screen_keeps_the_recipe_but_the_launch_counts():
    full = policy.TimingConfig(cold_l2=False, max_total_ms=50.0, min_repetitions=5, warmup_share=0.1)
    chunk = policy.screen_timing(full)
    assert (chunk.warmup, chunk.repetitions) == (policy.SCREEN_WARMUP, policy.SCREEN_LAUNCHES)
    assert (chunk.cold_l2, chunk.max_total_ms, chunk.min_repetitions, chunk.warmup_share) == (False, 50.0, 5, 0.1)


def test_a_timing_steps_deadline_follows_the_recipe():
    """However slow the kernel, the first launch and min_repetitions run, each with a check
    behind it as long as the case's validation took: the deadline grows with both."""
    timing = policy.TimingConfig(repetitions=20, max_total_ms=200.0, min_repetitions=6)
    d = Deadlines(timing, kernel_timeout_s=10.0)
    d.validated("big", 500.0)
    started = Started("big", Step.TIME)
    assert d.after(started) == 10.0 + 0.4 + (1 + 6 + 20) * 0.5
    assert Deadlines(dataclasses.replace(timing, min_repetitions=60), 10.0).after(Started("new", Step.TIME)) == 10.4


def test_a_module_load_waits_as_long_as_a_case_setup():
    """After LOAD the worker sets up the first case unannounced (inputs of gigabytes drawn and
    uploaded) and no kernel runs: the wait is the setup allowance, not the kernel's timeout."""
    from warpsmith.agent.evaluate.deadlines import CASE_SETUP_S
    d = Deadlines(policy.TimingConfig(), kernel_timeout_s=10.0)
    assert d.after(Started("", Step.LOAD)) == d.after(None) == CASE_SETUP_S > 10.0
    assert d.after(Started("c", Step.VALIDATE)) == 10.0
