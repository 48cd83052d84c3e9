"""The base of every error a person should see as one sentence (what, which, why, what to do)."""


class BlobdexError(Exception):
    """Raised for bad input or a failed operation whose message is written for the user."""
