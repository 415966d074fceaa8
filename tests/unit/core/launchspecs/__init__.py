"""Unit tests of ``agentrun.core.launchspecs``: no cluster, no clock of their own."""
