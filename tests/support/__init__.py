"""What the test files share: service starters, fixtures' bodies, workspaces, run files.

A test module imports from here, never from another test module (tests/repo/test_architecture.py).
"""
