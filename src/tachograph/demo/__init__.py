"""The example agent that ``tacho demo`` records and replays."""
