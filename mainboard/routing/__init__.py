"""The router behind ``board.on("auto")`` and ``submit --on auto``: policy, below the facade."""
