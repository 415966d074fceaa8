"""Unit tests of ``agentrun.plugin``: no cluster, no clock of their own."""
