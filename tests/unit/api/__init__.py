"""Unit tests of ``agentrun.api``: no cluster, no clock of their own."""
