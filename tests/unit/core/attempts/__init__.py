"""Unit tests of ``agentrun.core.attempts``: no cluster, no clock of their own."""
