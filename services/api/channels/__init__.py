"""Channel sessions (a WhatsApp number) and their webhook secrets."""
