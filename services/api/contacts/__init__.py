"""``/api/v1/contacts``: the customers an organization talks to — find, read, correct."""
