"""The benchmark suite's library: what several of bench/'s entry points share. Modules here import
nothing heavy at package import, so a numpy-only venv (bench/openpi_baseline) can use model_time."""
