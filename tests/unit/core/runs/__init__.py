"""Unit tests of ``agentrun.core.runs``: no cluster, no clock of their own."""
