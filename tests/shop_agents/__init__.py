"""Example agents the runtime, replay and dry-run tests record and replay."""
