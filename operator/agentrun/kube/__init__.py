"""The only code that talks to the Kubernetes API: reading the world and applying steps.

Every write here carries a precondition (a resourceVersion, a pod uid, or create's own
"must not exist"), so two operators, or one restarted mid-way, can never apply the same
decision twice: the loser gets a conflict, re-reads, and decides again.
"""
