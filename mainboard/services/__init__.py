"""Daemons the workspace runs for itself: the embedded broker and Flower."""
