"""The audit log of sensitive mutations [004 §10.10]."""
