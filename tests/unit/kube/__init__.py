"""Unit tests of ``agentrun.kube``: no cluster, no clock of their own."""
