"""The demo models (DESIGN section 5), built from code with fixed seeds."""
