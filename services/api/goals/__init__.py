"""``/api/v1/goals``: the owner's view of ``/goal`` and ``/loop`` work, and a way to stop it."""
