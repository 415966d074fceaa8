"""Unit tests of ``agentrun.core.slots``: no cluster, no clock of their own."""
