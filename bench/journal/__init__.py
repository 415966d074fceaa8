"""The journal benchmark (``python -m bench.journal``, ``make bench-journal``): the project's
journal beside LangGraph's ``PostgresSaver`` on a throwaway local PostgreSQL (``postgres``),
one module a side (``langgraph_side``), each returning the same shape of figures."""
