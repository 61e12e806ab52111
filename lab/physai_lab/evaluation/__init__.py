"""Closed-loop evaluation of a policy through the real serving path, in simulated time
(success rate, and the Kairos Figure 11 accuracy-efficiency trade-off)."""
