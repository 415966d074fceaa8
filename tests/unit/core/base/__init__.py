"""Unit tests of ``agentrun.core.base``: no cluster, no clock of their own."""
