"""``python -m shop_agents.crash_child STORE RUN_ID``: record the shop agent as RUN_ID.

Run by the crash tests with ``SHOP_HANG_IN`` naming a tool that signals and then sleeps
until the parent kills this process; ``SHOP_PROCESSED=1`` records with
:func:`shop.mark_requests` as a processor; ``SHOP_DURABILITY`` names the durability policy.
"""

from __future__ import annotations

import os
import sys

import tachograph as tg

from . import shop


def main() -> None:
    store_path, run_id = sys.argv[1], sys.argv[2]
    processors = [shop.mark_requests] if os.environ.get("SHOP_PROCESSED") else []
    tg.record_run(
        shop.build(),
        shop.TASK,
        store=tg.SQLiteStore(store_path),
        run_id=run_id,
        processors=processors,
        durability=os.environ.get("SHOP_DURABILITY", "effects"),
    )


if __name__ == "__main__":
    main()
