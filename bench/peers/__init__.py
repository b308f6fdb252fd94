"""Peers: small programs a user could write instead of txbuffer, run by the bench on the same input."""
