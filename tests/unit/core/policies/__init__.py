"""Unit tests of ``agentrun.core.policies``: no cluster, no clock of their own."""
