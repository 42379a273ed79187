"""The machines of mainboard.toml: reaching them, mirroring the workspace, rentals, facts, compute."""
