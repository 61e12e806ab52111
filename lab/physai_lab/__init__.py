"""Training, evaluation and simulation tools beside physai_ros: used by its tests, benchmarks and
training scripts, never by a running fleet (test/test_import_graph.py keeps physai_ros off it)."""
