"""Autonomy settings, kill switches and approvals of proposed actions (docs/autonomy.md)."""
