"""`mainboard up`: one foreground supervisor of the broker, Flower, the dashboard and local
workers. ``children`` (one interface over each kind of process), ``up`` (start, watch,
restart within a budget, stop everything on Ctrl-C or SIGTERM)."""
