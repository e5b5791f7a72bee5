"""Tests of regression replay: saving a corpus, replaying it, the CLI and the pytest plugin."""
