"""fleet.yaml validation helpers, kept importable here for serving's modules: they live in
physai_ros.config_fields (the foundation layer) so packages below serving, such as
physai_ros.pipeline whose task keys serving.config parses, use the same helpers and errors
without an import circle."""
from physai_ros.config_fields import (FleetConfigError, boolean, integer, join_key, mapping, no_unknown, number,
                                      required, string, strings)

__all__ = ["FleetConfigError", "boolean", "integer", "join_key", "mapping", "no_unknown", "number", "required", "string",
           "strings"]
