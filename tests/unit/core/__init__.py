"""Unit tests of ``agentrun.core``: no cluster, no clock of their own."""
