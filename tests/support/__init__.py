"""What tests, benchmarks and the demo share, imported by name (``from tests.support.cluster
import localcluster``): ``cluster/`` the local control plane, its node and images;
``faults/`` the fault scenarios and their drivers; ``actors/`` the processes a test runs
beside agentrun (operators, workers, the effect owner); ``plays/`` what a test sets up and
checks in its namespace; ``waiting`` and ``scrapes`` at the top, used everywhere."""
