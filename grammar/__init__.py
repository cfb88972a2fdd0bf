"""The .cem grammar, installed as package data (grammar/cem.lark)."""
