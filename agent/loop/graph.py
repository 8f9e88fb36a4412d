"""The loop as a LangGraph StateGraph:

    plan -> propose -> evaluate -> (profile) -> reflect -> propose ... -> conclude -> END

An attempt is one node: evaluate runs it whole on the backend, candidate to verdict
(agent/evaluate/attempt.py), streaming its compile and per-case progress. A step's
proposals may be a batch (--batch): the first goes on at once, the others wait in state
(`queued`) and are taken by the next propose nodes, one attempt each, before the
proposer is asked again. Evaluated ahead (agent/evaluate/ahead.py), a step's attempts run
on the GPU while the graph reflects on the earlier ones, and a tuner's next step is
proposed in the background once less than a step is left to run
(agent/loop/proposals_ahead.py). evaluate tells the backend the best score, so a clearly
slower candidate stops timing early (``rejected_early``, not a failure: the next
proposal still optimises). A failure (a proposal that is not a kernel, a compile, a
launch rule, a wrong answer) goes on to reflect, which switches the next proposal to
repair mode; every attempt, repairs included, counts against the budget held in state.
Nodes reach the GPU, the proposer and the tracker through the run's context; they stream
typed events (warpsmith.agent.loop.events) for any front end and leave their results in the
checkpointed state. Sessions stored when compile, validate and benchmark were nodes of
their own resume through agent/loop/legacy_nodes.py.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from ..evaluate.results import Progress, Status
from .context import LoopContext
from .nodes.conclude import conclude
from .nodes.evaluate import evaluate, profile
from .nodes.plan import plan
from .nodes.propose import propose
from .nodes.reflect import reflect
from .state import LoopState, attempt_in_flight

NODES = ("plan", "propose", "evaluate", "profile", "reflect", "conclude")
LoopGraph = CompiledStateGraph[LoopState, LoopContext, LoopState, LoopState]  # the loop's graph, compiled


def _after_propose(state: LoopState) -> str:
    """On to evaluate with a candidate; a proposal that failed goes to reflect, an ended session to conclude."""
    if state.get("finished"):
        return "conclude"
    return "evaluate" if attempt_in_flight(state).status == Progress.PENDING else "reflect"


def _after_evaluate(state: LoopState, runtime: Runtime[LoopContext]) -> str:
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
    g.add_node("evaluate", evaluate)
    g.add_node("profile", profile)
    g.add_node("reflect", reflect)
    g.add_node("conclude", conclude)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", _after_plan, ["propose", END])
    g.add_conditional_edges("propose", _after_propose, ["evaluate", "reflect", "conclude"])
    g.add_conditional_edges("evaluate", _after_evaluate, ["profile", "reflect"])
    g.add_edge("profile", "reflect")
    g.add_conditional_edges("reflect", _after_reflect, ["propose", "conclude"])
    g.add_edge("conclude", END)
    return g
