"""Stores move bytes for the verbs; names and keys are computed by :mod:`publish.layout`."""
