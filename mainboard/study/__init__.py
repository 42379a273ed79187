"""Studies: many simultaneous jobs under one identity, each with a content-addressed run id."""
