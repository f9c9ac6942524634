"""Identity: organizations, users, login with a second factor, API tokens."""
