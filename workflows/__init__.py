"""Deterministic workflow code: the chat turn, its decisions and its payloads."""
