"""The organization's outgoing webhook: where handoffs and budget incidents are announced."""
