"""What every benchmark shares: where its figures came from (provenance) and its own section
of docs/benchmarks.md (report)."""
