"""Unit tests of ``agentrun.examples``: no cluster, no clock of their own."""
