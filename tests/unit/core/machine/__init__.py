"""Unit tests of ``agentrun.core.machine``: no cluster, no clock of their own."""
