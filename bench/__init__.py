"""The tachograph benchmark suite; run it with ``python -m bench.run``."""
