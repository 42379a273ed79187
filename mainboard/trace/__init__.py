"""One timeline across runs, jobs and machines: ``mainboard trace merge``."""
