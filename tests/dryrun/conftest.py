from shop_agents.fixtures import ledger, store

__all__ = ["ledger", "store"]
