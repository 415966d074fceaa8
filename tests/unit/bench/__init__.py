"""Unit tests of the benchmarks' own arithmetic and reports (bench/)."""
