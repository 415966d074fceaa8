"""The sync client against kubernetes_asyncio on the hot path (``python -m bench.client``; no
make target)."""
