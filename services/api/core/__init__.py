"""What every API domain uses: errors, the request's database session, authentication."""
