"""mainboard.bridges"""
