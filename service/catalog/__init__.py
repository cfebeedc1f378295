"""What a team can run and what it has used: GET /v1/models and GET /v1/usage."""
