"""Teams and API keys: creation, authentication, revocation, the team's Hub token."""
