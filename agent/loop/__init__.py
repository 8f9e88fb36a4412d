"""The LangGraph loop: the graph and its state, a session's lifecycle and control (pause, stop, budgets), the events front ends consume."""
