"""``python -m agents.crash_child STORE RUN_ID``: record the shop agent as RUN_ID.

Run by the crash tests with ``SHOP_HANG_IN`` naming a tool that signals and then sleeps
until the parent kills this process.
"""

from __future__ import annotations

import sys

import tachograph as tg

from . import shop


def main() -> None:
    store_path, run_id = sys.argv[1], sys.argv[2]
    tg.record_run(shop.build(), shop.TASK, store=tg.SQLiteStore(store_path), run_id=run_id)


if __name__ == "__main__":
    main()
