"""Unit tests of ``agentrun.worker``: no cluster, no clock of their own."""
