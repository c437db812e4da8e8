"""Experiments and demos built on the public API (they sit on top of everything else)."""
