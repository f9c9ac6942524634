"""Conversations: read one, and hand a conversation taken over by humans back to the agents."""
