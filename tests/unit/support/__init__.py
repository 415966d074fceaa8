"""Unit tests of the test support that stands between a test and the real thing (tests/support/)."""
