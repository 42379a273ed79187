"""mainboard.tasks"""
