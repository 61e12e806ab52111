"""The launcher: `physai-fleet` (cli), the process plan a fleet runs (plan, shared with
launch/fleet.launch.py and the tests), starting and stopping those processes (processes), the
start-up checks and progress (startup), and the end-of-run summary (report).

The top layer of the package: it starts nodes and hosts the fleet monitor node, and nothing
below it imports it (test/test_import_graph.py)."""
