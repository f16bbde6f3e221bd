"""draftguard: catch silent config overrides and broken speculative-decoding drafters before merge."""

__version__ = "0.1.0"
