"""The run layer, under the front ends: what they share of planning, keeping and following runs."""
