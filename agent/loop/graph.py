"""The loop as a LangGraph StateGraph:

    plan -> propose -> compile -> validate -> benchmark -> reflect -> propose ... -> END

A step's proposals may be a batch (--batch): the first goes on at once, the others
wait in state (`queued`) and are taken by the next propose nodes, one attempt each,
before the proposer is asked again. Evaluated ahead (agent/evaluate/ahead.py), a step's
candidates run on the GPU while the graph reflects on the earlier ones, and a tuner's
next step is proposed in the background once less than a step is left to run
(agent/loop/proposals_ahead.py). benchmark tells the evaluator the best score, so a
clearly slower candidate stops timing early (``rejected_early``, not a failure: the
next proposal still optimises). A failure at compile or validate goes straight to
reflect, which switches the next proposal to repair mode; every attempt, repairs included, counts against
the budget held in state. Nodes reach the GPU, the proposer and the tracker
through the run's context; they stream typed events (agent.loop.events) for any
front end and leave their results in the checkpointed state.
"""

from __future__ import annotations

from typing import Callable

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from ..evaluate.results import Progress, Status
from .context import LoopContext
from .nodes.conclude import conclude
from .nodes.evaluate import benchmark, compile_node, profile, validate
from .nodes.plan import plan
from .nodes.propose import propose
from .nodes.reflect import reflect
from .state import LoopState, attempt_in_flight

NODES = ("plan", "propose", "compile", "validate", "benchmark", "profile", "reflect", "conclude")


def _after(progress: Progress, next_node: str) -> Callable[[LoopState], str]:
    """Route on progress: on to `next_node` if the attempt got there, else (a verdict) to reflect."""
    def route(state: LoopState) -> str:
        return next_node if attempt_in_flight(state).status == progress else "reflect"
    return route


def _after_propose(state: LoopState) -> str:
    if state.get("finished"):
        return "conclude"
    return _after(Progress.PENDING, "compile")(state)


def _after_benchmark(state: LoopState, runtime: Runtime[LoopContext]) -> str:
    profiling = runtime.context.profiler is not None
    return "profile" if profiling and attempt_in_flight(state).status == Status.OK else "reflect"


def _after_reflect(state: LoopState) -> str:
    return "conclude" if state.get("finished") else "propose"


def _after_plan(state: LoopState) -> str:
    return END if state["iteration"] >= state["budget"] else "propose"


def build_graph() -> StateGraph[LoopState, LoopContext, LoopState, LoopState]:
    g = StateGraph(LoopState, context_schema=LoopContext)
    g.add_node("plan", plan)
    g.add_node("propose", propose)
    g.add_node("compile", compile_node)
    g.add_node("validate", validate)
    g.add_node("benchmark", benchmark)
    g.add_node("profile", profile)
    g.add_node("reflect", reflect)
    g.add_node("conclude", conclude)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", _after_plan, ["propose", END])
    g.add_conditional_edges("propose", _after_propose, ["compile", "reflect", "conclude"])
    g.add_conditional_edges("compile", _after(Progress.COMPILED, "validate"), ["validate", "reflect"])
    g.add_conditional_edges("validate", _after(Progress.VALIDATED, "benchmark"), ["benchmark", "reflect"])
    g.add_conditional_edges("benchmark", _after_benchmark, ["profile", "reflect"])
    g.add_edge("profile", "reflect")
    g.add_conditional_edges("reflect", _after_reflect, ["propose", "conclude"])
    g.add_edge("conclude", END)
    return g
