"""openpi's websocket clients as robots of the fleet (nodes/openpi_gateway.py), without ROS: the
wire format, openpi's observation layouts, and one connection's session."""
