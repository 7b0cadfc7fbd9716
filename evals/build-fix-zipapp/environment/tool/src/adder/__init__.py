"""Adds numbers given on the command line."""
