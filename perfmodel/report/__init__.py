"""Outputs for people: terminal tables (text.py) and plotly capacity reports."""
