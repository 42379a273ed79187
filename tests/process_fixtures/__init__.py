"""Small processes for the process-protocol tests (misbehaving ones included)."""
