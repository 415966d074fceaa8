"""The benchmarks, one package each, run by name from the repository root
(``python -m bench.loop``); what each measures and its make target: bench/README.md."""
