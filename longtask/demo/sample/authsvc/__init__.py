"""authsvc: a tiny service with login and one authenticated endpoint."""
