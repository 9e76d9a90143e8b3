"""Scoring (layer 2): requests → log-likelihoods and generations, through one Backend protocol and the score cache."""
