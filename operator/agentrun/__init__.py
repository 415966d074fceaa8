"""agentrun: durable execution across worker lifecycles for AI-agent runs on Kubernetes.

Layers, each importing only those below it (enforced by import-linter):
``cli`` → ``controller`` (Kopf handlers) → ``kube`` (the only code that calls the
API) → ``core`` (pure decisions) → ``api`` (models and names).
"""
