"""Scorers, scoring runs and step scores arrive with the scoring issue."""
