"""Unit tests of ``agentrun.controller``: no cluster, no clock of their own."""
