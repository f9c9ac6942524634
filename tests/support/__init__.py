"""Test helpers shared by every tier: where the broker and database come from."""
