"""Tests of the tacho command line."""
