"""Capture: the boundary every recording call crosses, the decorators, the recorder."""
