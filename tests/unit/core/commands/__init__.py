"""Unit tests of ``agentrun.core.commands``: no cluster, no clock of their own."""
