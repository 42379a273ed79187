"""mainboard.integrators"""
