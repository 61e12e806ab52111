"""Message <-> plain data, one module per message family (the plain types: physai_ros.protocol,
control.types, control.joint_trajectory).

Only message classes are imported here (no node machinery), so nodes, tests, benches and
launchers share one conversion per message and nothing else touches message fields.
"""
