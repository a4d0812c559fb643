"""Views: one window of the fleet under a scope, as pages and downloads draw it, from either read path."""
