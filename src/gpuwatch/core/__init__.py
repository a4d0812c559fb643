"""The vocabulary every layer shares: units, errors, the fleet's entities, frame contracts, settings."""
