"""The API of agentrun: resource models, configuration documents and the names they use.

Nothing here does I/O; the CRDs in ``crds/`` are generated from these models.
"""
